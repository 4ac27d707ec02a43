package provider

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// The Pulumi CLI starts its plugins in process groups of their own and does not end them when it
// is killed: a provider would go on creating servers and deploying nodes for up to five minutes (the
// SDK's health check of its engine) after the CLI that asked for it died. A CLI is killed when its
// stand's lease is about to expire (engine/fence.go) or with its daemon: the provider must end with
// it, or it would work on a stand that another replica may take over.

// errOrphaned: the CLI ended before the provider could ask to end with it.
var errOrphaned = errors.New("the Pulumi CLI that started the provider has ended")

// dieWithParent asks the kernel to kill this process when its parent ends, and checks that the
// parent did not end before the request: its pid would then be another process's (init or a
// subreaper), and no signal would come.
func dieWithParent() error {
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return err
	}
	if os.Getppid() != parent || parent == 1 {
		return errOrphaned
	}
	return nil
}
