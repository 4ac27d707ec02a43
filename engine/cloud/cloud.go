// Package cloud is what the engine and its provider need of a cloud's API: servers by id, name or
// labels, creating one attached to a network with an SSH key and user data, labelling, resizing and
// deleting it, and the server types' prices. Hetzner is the one cloud shipped (package
// cloud/hetzner); a second is a package implementing Cloud, opened by name where the provider
// opens clouds (provider.Clouds; docs/architecture.md#where-do-i-add).
//
// Every call waits for what it started to finish. Errors carry their reason (reason.Of), so the
// engine's classification needs to know no cloud's error codes; a call of one request returns the
// API's error as it is, for the caller to say what it was doing.
package cloud

import (
	"context"
	"errors"
	"time"

	"github.com/stands-engine/stands-reconciler/stands"
)

// ErrNameTaken is CreateServer's error when a server of the name exists: one another run's create
// made meanwhile (a create the cloud finished after its caller had gone), to look up and reclaim.
var ErrNameTaken = errors.New("a server of this name exists")

// Opener opens one project of a cloud with a token, at an endpoint ("" for the cloud's own).
type Opener func(token, endpoint string) Cloud

// Cloud is one project of a cloud, reached with one token.
type Cloud interface {
	// Server is a server by id; nil when there is none.
	Server(ctx context.Context, id int64) (*Server, error)
	// ServerByName is a server by name; nil when there is none.
	ServerByName(ctx context.Context, name string) (*Server, error)
	// Servers are the servers carrying every label of labels.
	Servers(ctx context.Context, labels map[string]string) ([]*Server, error)
	// Network is a network by name; nil when there is none.
	Network(ctx context.Context, name string) (*Network, error)
	// SSHKey is an SSH key of the project by name; nil when there is none.
	SSHKey(ctx context.Context, name string) (*SSHKey, error)
	// CreateServer creates a server and waits until it runs. A server that was created but did not
	// come up is returned with the error, so its id can be recorded.
	CreateServer(ctx context.Context, o CreateOptions) (*Server, error)
	// Attach attaches a server to a network and returns it as it is then.
	Attach(ctx context.Context, srv *Server, network *Network) (*Server, error)
	// SetLabels replaces a server's labels.
	SetLabels(ctx context.Context, id int64, labels map[string]string) error
	// Resize changes a server's type in place: shut down, change the type keeping the disk (so a
	// later downgrade stays possible), power on; on again even when the change was refused.
	Resize(ctx context.Context, id int64, serverType string) error
	// DeleteServer deletes a server; one already gone is no error.
	DeleteServer(ctx context.Context, id int64) error
	// Prices are the server types' monthly list prices by location.
	Prices(ctx context.Context) (stands.Prices, error)
}

// Server is a server as the cloud has it.
type Server struct {
	ID         int64
	Name       string
	Type       string
	Image      string
	Location   string
	Labels     map[string]string
	PublicIPv4 string // "" when it has none
	Private    []Attachment
	Created    time.Time
}

// Attachment is a server's address in a private network.
type Attachment struct {
	NetworkID int64
	IP        string
}

// PrivateIP is the server's address in the network, or in the first network when networkID is 0.
func (s *Server) PrivateIP(networkID int64) (Attachment, bool) {
	for _, a := range s.Private {
		if networkID == 0 || a.NetworkID == networkID {
			return a, true
		}
	}
	return Attachment{}, false
}

// Network is a private network.
type Network struct {
	ID      int64
	Name    string
	IPRange string // its CIDR, which cloud-init templates see as network_ip_range
}

// SSHKey is an SSH key of the project, which a new server authorizes.
type SSHKey struct {
	ID   int64
	Name string
}

// CreateOptions describe a new server.
type CreateOptions struct {
	Name, Type, Image, Location string
	SSHKey                      *SSHKey
	UserData                    string
	Labels                      map[string]string
	Network                     *Network
}
