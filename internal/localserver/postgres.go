package localserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	_ "github.com/lib/pq" // the driver the Pulumi CLI's postgres backend uses
)

// Postgres is a real PostgreSQL server (Debian's, /usr/lib/postgresql/<v>/bin) on 127.0.0.1, in a
// data folder of its own made by initdb, with password (SCRAM) authentication for one superuser and
// one database: the state backend and lease store of several reconcilers.
//
// PostgreSQL refuses to run as root, so under root it runs as the "postgres" user, and its folder is
// one that user can reach: a folder of its own under the system's temporary folder (a test's
// t.TempDir() sits under a folder only root may enter).
type Postgres struct {
	Addr     string // 127.0.0.1:PORT
	User     string
	Password string
	Database string
	Dir      string // data, socket, log; removed by Remove

	bin    string
	cred   *syscall.Credential // nil when not root
	server *Process
}

// PostgresBinDir finds the server's programs: dir when set, else the newest Debian version's.
func PostgresBinDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) == 0 {
		return "", errors.New("no PostgreSQL server found under /usr/lib/postgresql (apt-get install postgresql)")
	}
	sort.Slice(found, func(i, j int) bool { return pgVersion(found[i]) < pgVersion(found[j]) })
	return filepath.Dir(found[len(found)-1]), nil
}

func pgVersion(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

// NewPostgres initialises a cluster in a new folder and starts it, until Stop; Remove deletes the
// folder. The database named db is created, owned by the superuser "stands".
func NewPostgres(ctx context.Context, binDir, db string) (_ *Postgres, err error) {
	p := &Postgres{bin: binDir, User: "stands", Password: RandomHex(16), Database: db}
	if p.Dir, err = os.MkdirTemp("", "stands-pg-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.Stop()
			p.Remove()
		}
	}()
	if err := p.runAs(); err != nil {
		return nil, err
	}
	pwfile := filepath.Join(p.Dir, "pwfile")
	if err := p.writeOwned(pwfile, p.Password+"\n"); err != nil {
		return nil, err
	}
	initdb := p.command(filepath.Join(binDir, "initdb"), "-D", p.dataDir(), "-U", p.User, "--pwfile", pwfile,
		"--auth=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	_ = os.Remove(pwfile)
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	p.Addr = "127.0.0.1:" + strconv.Itoa(port)
	if err := p.Start(ctx); err != nil {
		return nil, err
	}
	admin, err := sql.Open("postgres", p.DSN("postgres"))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+db); err != nil {
		return nil, fmt.Errorf("create database %s: %w", db, err)
	}
	return p, nil
}

// runAs picks the user the server runs as and gives it the folder.
func (p *Postgres) runAs() error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("PostgreSQL cannot run as root and there is no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return os.Chown(p.Dir, uid, gid)
}

func (p *Postgres) writeOwned(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	if p.cred != nil {
		return os.Chown(path, int(p.cred.Uid), int(p.cred.Gid))
	}
	return nil
}

func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = []string{"LANG=C", "PATH=/usr/bin:/bin"}
	cmd.Dir = p.Dir
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

func (p *Postgres) dataDir() string { return filepath.Join(p.Dir, "data") }
func (p *Postgres) logPath() string { return filepath.Join(p.Dir, "postgres.log") }

// DSN is a lib/pq URL for database db, password included: for the test's own connections, never
// for a reconciler (which takes its password from a credential).
func (p *Postgres) DSN(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(p.User, p.Password), Host: p.Addr, Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// BackendURL is the Pulumi backend URL of the database, without a password.
func (p *Postgres) BackendURL() string {
	return "postgres://" + p.User + "@" + p.Addr + "/" + p.Database + "?sslmode=disable"
}

// Start runs the server on its address and waits until it accepts connections. fsync is off: the
// tests restart it cleanly (Stop) and never count on surviving a power cut.
func (p *Postgres) Start(ctx context.Context) error {
	_, port, err := net.SplitHostPort(p.Addr)
	if err != nil {
		return err
	}
	cmd := p.command(filepath.Join(p.bin, "postgres"), "-D", p.dataDir(), "-c", "listen_addresses=127.0.0.1",
		"-c", "port="+port, "-c", "unix_socket_directories="+p.Dir, "-c", "max_connections=300", "-c", "fsync=off",
		"-c", "log_min_messages=warning")
	proc, err := StartProcess(cmd, p.logPath())
	if err != nil {
		return err
	}
	p.server = proc
	db, err := sql.Open("postgres", p.DSN("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := db.PingContext(ctx)
		if err == nil {
			return nil
		}
		if done, werr := proc.Exited(); done || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("postgres did not accept connections on %s (exited %v: %v): %w\n%s", p.Addr, done, werr, err, Tail(p.logPath()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down fast (SIGINT: open sessions are ended, as in a failover) and waits.
func (p *Postgres) Stop() {
	if p.server != nil {
		p.server.StopWith(syscall.SIGINT, 30*time.Second)
		p.server = nil
	}
}

// Pid is the postmaster's process id, 0 while stopped.
func (p *Postgres) Pid() int {
	if p.server == nil {
		return 0
	}
	return p.server.Pid()
}

// Remove deletes the server's folder; it must be stopped.
func (p *Postgres) Remove() { _ = os.RemoveAll(p.Dir) }
