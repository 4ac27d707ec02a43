package hcloudsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
)

// state is everything the simulator remembers; it is what the state file holds.
type state struct {
	NextID   int64              `json:"next_id"`
	Servers  map[int64]*server  `json:"servers"`
	Networks map[int64]*network `json:"networks"`
	SSHKeys  map[int64]*sshKey  `json:"ssh_keys"`
	Actions  map[int64]*action  `json:"actions"`
}

func newState() state {
	return state{NextID: 1000, Servers: map[int64]*server{}, Networks: map[int64]*network{}, SSHKeys: map[int64]*sshKey{}, Actions: map[int64]*action{}}
}

func (st *state) id() int64 {
	st.NextID++
	return st.NextID
}

type server struct {
	ID           int64             `json:"id"`
	Name         string            `json:"name"`
	Status       string            `json:"status"`
	Created      time.Time         `json:"created"`
	ServerType   string            `json:"server_type"`
	Disk         int               `json:"disk,omitempty"` // GB; 0: the type's (state of earlier versions)
	Image        int64             `json:"image"`
	Location     string            `json:"location"`
	UserData     string            `json:"user_data"`
	Labels       map[string]string `json:"labels"`
	SSHKeys      []int64           `json:"ssh_keys"`
	PublicIPv4   string            `json:"public_ipv4"`
	PublicIPv4ID int64             `json:"public_ipv4_id"`
	Private      []privateNet      `json:"private"`
}

type privateNet struct {
	Network int64  `json:"network"`
	IP      string `json:"ip"`
	MAC     string `json:"mac"`
}

type network struct {
	ID      int64                  `json:"id"`
	Name    string                 `json:"name"`
	IPRange string                 `json:"ip_range"`
	Subnets []schema.NetworkSubnet `json:"subnets"`
	Labels  map[string]string      `json:"labels"`
	Created time.Time              `json:"created"`
}

type sshKey struct {
	ID          int64             `json:"id"`
	Name        string            `json:"name"`
	Fingerprint string            `json:"fingerprint"`
	PublicKey   string            `json:"public_key"`
	Labels      map[string]string `json:"labels"`
	Created     time.Time         `json:"created"`
}

type action struct {
	ID        int64                            `json:"id"`
	Command   string                           `json:"command"`
	Status    string                           `json:"status"`
	Started   time.Time                        `json:"started"`
	Finished  *time.Time                       `json:"finished"`
	Due       time.Time                        `json:"due"`
	Resources []schema.ActionResourceReference `json:"resources"`
	Error     *schema.ActionError              `json:"error"`
	// Then is the server status set when the action succeeds ("" leaves it).
	Then string `json:"then"`
}

func loadState(path string) (*state, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state file: %w", err)
	}
	st := newState()
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("parse state file %s: %w", path, err)
	}
	return &st, nil
}

// save writes the state file atomically (temporary file, then rename), so a crash never leaves half
// a file behind.
func (s *Sim) save() error {
	if s.stateFile == "" {
		return nil
	}
	data, err := json.MarshalIndent(&s.st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.stateFile), ".hcloudsim-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), s.stateFile)
}
