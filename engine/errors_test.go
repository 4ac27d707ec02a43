package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want reason.Reason
		kind reason.Kind
	}{
		{"canceled", fmt.Errorf("pulumi up x: %w", context.Canceled), reason.Canceled, reason.Waiting},
		{"protected", fmt.Errorf("destroy: %w", ErrProtected), reason.Protected, reason.Stalling},
		{"not owned", fmt.Errorf("open: %w", ErrNotOwned), reason.NotOwned, reason.Stalling},
		{"foreign server", fmt.Errorf("create: %w", provider.ErrNotOurs), reason.NotOwned, reason.Stalling},
		{"the cloud's auth, typed", reason.Wrap(reason.ProviderAuth, errors.New("unable to authenticate")), reason.ProviderAuth, reason.Stalling},
		{"the cloud's rate limit, typed", fmt.Errorf("list: %w", reason.Wrap(reason.RateLimited, errors.New("limit"))), reason.RateLimited, reason.Waiting},
		{"provider auth through the CLI", errors.New(`error: create server demo-x: unable to authenticate (unauthorized) [reason: ProviderAuth]`), reason.ProviderAuth, reason.Stalling},
		{"cloud down through the CLI", errors.New("error: ... (service_error) [reason: CloudUnavailable]\nstdout: ..."), reason.CloudUnavailable, reason.Waiting},
		// The engine reads no cloud's error codes: without the provider's mark, a code is text.
		{"a cloud's code without a mark", errors.New(`error: ... (service_error)`), reason.Failure, reason.Generic},
		{"a mark the catalogue does not have", errors.New(`error: x [reason: NoSuchReason]`), reason.Failure, reason.Generic},
		{"concurrent update", errors.New(`error: [409] Conflict: Another update is currently in progress.`), reason.UpdateConflict, reason.Waiting},
		{"diy lock", errors.New("error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or delete the lock file with `pulumi cancel`."), reason.UpdateConflict, reason.Waiting},
		{"live lock here", fmt.Errorf("demo/x: %w (pid 1)", ErrUpdateInProgress), reason.UpdateConflict, reason.Waiting},
		{"lock of another host", fmt.Errorf("demo/x: %w", ErrLockedElsewhere), reason.StackLocked, reason.Waiting},
		{"pending operations", errors.New("warning: Attempting to deploy or update resources with 1 pending operations from previous deployment."), reason.PendingOperations, reason.Generic},
		{"passphrase", errors.New("error: constructing secrets manager of type \"passphrase\": incorrect passphrase"), reason.Passphrase, reason.Stalling},
		{"missing network", errors.New(`network "stands-net" does not exist in the cloud project [reason: MissingPrerequisite]`), reason.MissingPrereq, reason.Stalling},
		{"plugin", errors.New("error: no resource plugin 'pulumi-resource-stands' found in the workspace"), reason.ProviderMissing, reason.Stalling},
		{"s3 down", errors.New("error: failed to open bucket s3://x: dial tcp 127.0.0.1:9: connect: connection refused"), reason.BackendUnavailable, reason.Waiting},
		{"unknown", errors.New("something else"), reason.Failure, reason.Generic},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Classify(c.err)
			if got != c.want || got.Kind() != c.kind {
				t.Errorf("Classify = %s/%s, want %s/%s", got, got.Kind(), c.want, c.kind)
			}
			// What leaves the engine carries its reason, so the loop reads it without the engine.
			wrapped := func() (err error) { err = c.err; classify(&err); return err }()
			if reason.Of(wrapped) != c.want || !errors.Is(wrapped, c.err) || wrapped.Error() != c.err.Error() {
				t.Errorf("reason.Of(classified) = %s, want %s; text %q", reason.Of(wrapped), c.want, wrapped)
			}
		})
	}
	if Classify(nil) != "" {
		t.Error("nil error classified")
	}
}

// TestCloudReasonsCrossTheCLI: a cloud's error reaches the loop with its reason through the real
// chain (the cloud package gives it, the provider marks it, the Pulumi CLI prints it, Classify reads
// the mark), where the engine knows no cloud's codes.
func TestCloudReasonsCrossTheCLI(t *testing.T) {
	cases := []struct {
		code string
		want reason.Reason
	}{
		{"service_error", reason.CloudUnavailable},
		{"invalid_input", reason.MissingPrereq},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			f := newFixture(t)
			f.Sim.Inject(hcloudsim.Fault{Method: http.MethodPost, Path: "/servers", Times: -1, Code: c.code})
			_, err := f.eng.Apply(testenv.Context(t, time.Minute), load(t, examples(t, ""), "stands/single/stand.yml"), false)
			if got := reason.Of(err); got != c.want {
				t.Fatalf("apply with every server create refused (%s): reason %s, want %s: %v", c.code, got, c.want, err)
			}
		})
	}
}
