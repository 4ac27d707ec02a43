// Command hcloudsim serves the Hetzner Cloud API simulator (package hcloudsim) for the local demo and
// for tests that run the reconciler as a separate process.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"errors"
	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/hcloudsim/vm"
	"github.com/stands-engine/stands-reconciler/internal/credential"
	"github.com/stands-engine/stands-reconciler/internal/logging"
	"github.com/stands-engine/stands-reconciler/internal/version"
	"log/slog"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hcloudsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8086", "address to serve on (loopback by default)")
	token := fs.String("token", "", "bearer token clients must send (default $HCLOUDSIM_TOKEN, or the contents of $HCLOUDSIM_TOKEN_FILE, or test-token)")
	state := fs.String("state", "", "state file: keep servers, networks and keys across restarts")
	delay := fs.Duration("action-delay", 2*time.Second, "how long actions run before they succeed")
	machine := fs.String("machine", "record", "machine backend: record (servers are records) or vm (servers are QEMU VMs, see -vm-dir)")
	vmDir := fs.String("vm-dir", "", "vm backend: folder of the servers' disks and sockets (default <state file>.vms, or a temporary folder)")
	vmRegistry := fs.String("vm-registry", "", "vm backend: host:port of a registry on loopback that guests reach as "+vm.RegistryGuestAddr)
	vmAccel := fs.String("vm-accel", "auto", "vm backend: auto (kvm when a probe boots the image with it, else tcg), tcg or kvm")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error ($LOG_LEVEL wins)")
	example := fs.Bool("example-project", false, "create the network stands-net and the SSH key stands-admin the example stands expect")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "hcloudsim %s\n", version.String())
		return 0
	}
	log := logging.New(stderr, *level)
	tok, err := resolveToken(*token)
	if err != nil {
		log.Error("read token", "err", err)
		return 1
	}
	if *machine != "record" && *machine != "vm" {
		fmt.Fprintf(stderr, "hcloudsim: unknown machine backend %q\n", *machine)
		return 2
	}
	m, err := machineBackend(*machine, *vmDir, *state, *vmRegistry, *vmAccel, log)
	if err != nil {
		fmt.Fprintf(stderr, "hcloudsim: %v\n", err)
		return 1
	}
	sim, err := hcloudsim.New(ctx, hcloudsim.WithToken(tok), hcloudsim.WithStateFile(*state), hcloudsim.WithActionDelay(*delay),
		hcloudsim.WithMachine(m), hcloudsim.WithLogger(log))
	if err != nil {
		log.Error("start simulator", "err", err)
		return 1
	}
	if *example {
		if err := sim.CreateExampleProject(examplePublicKey); err != nil {
			log.Error("create the example project", "err", err)
			return 1
		}
	}
	l, err := hcloudsim.Listen(sim, *listen)
	if err != nil {
		log.Error("listen", "addr", *listen, "err", err)
		return 1
	}
	// The endpoint on stdout, alone on its line, for scripts that start the simulator on port 0.
	fmt.Fprintln(stdout, l.Endpoint)
	log.Info("serving the Hetzner Cloud API simulator", "endpoint", l.Endpoint, "state", *state, "machine", *machine, "action_delay", *delay)
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(shutdown); err != nil {
		log.Error("shut down", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

// machineBackend is what a server is: a record, or a QEMU VM whose disk and sockets live in a
// folder (next to the state file, else a temporary one).
func machineBackend(kind, dir, state, registry, accel string, log *slog.Logger) (hcloudsim.Machine, error) {
	switch kind {
	case "record":
		return &hcloudsim.RecordMachine{}, nil
	case "vm":
	default:
		return nil, fmt.Errorf("unknown machine backend %q", kind)
	}
	if dir == "" && state != "" {
		dir = state + ".vms"
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "hcloudsim-vms-"); err != nil {
			return nil, fmt.Errorf("vm folder: %w", err)
		}
	}
	// VMs keep running after the simulator stops; a restart with the same state reattaches them.
	vms, err := vm.New(vm.Config{Dir: dir, Registry: registry, Accel: accel, Detach: true, Log: log})
	if err != nil {
		return nil, fmt.Errorf("vm backend: %w", err)
	}
	return vms, nil
}

// examplePublicKey is the admin key of the demo project; nobody holds its private half, as nobody can
// log in to a simulated server.
const examplePublicKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk7bbrL7xNWSKbN5I2aE9UFLcB0dKlYuOXl4d9q0KZb stands-demo-admin"

// resolveToken follows the *_FILE convention: secrets come from files (systemd credentials), not flags.
func resolveToken(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil // a simulator's token: a test fixture, not a credential
	}
	tok, err := credential.Read(os.Getenv, "HCLOUDSIM_TOKEN")
	if errors.Is(err, credential.ErrNotSet) {
		return "test-token", nil
	}
	return tok, err
}
