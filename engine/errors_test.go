package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/stands-engine/stands-reconciler/engine/provider"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		reason Reason
		kind   Kind
	}{
		{"canceled", fmt.Errorf("pulumi up x: %w", context.Canceled), ReasonCanceled, Waiting},
		{"protected", fmt.Errorf("destroy: %w", ErrProtected), ReasonProtected, Stalling},
		{"not owned", fmt.Errorf("open: %w", ErrNotOwned), ReasonNotOwned, Stalling},
		{"foreign server", fmt.Errorf("create: %w", provider.ErrNotOurs), ReasonNotOwned, Stalling},
		{"typed hcloud auth", hcloud.Error{Code: hcloud.ErrorCodeUnauthorized, Message: "unable to authenticate"}, ReasonProviderAuth, Stalling},
		{"typed rate limit", fmt.Errorf("list: %w", hcloud.Error{Code: hcloud.ErrorCodeRateLimitExceeded}), ReasonRateLimited, Waiting},
		{"provider auth through the CLI", errors.New(`error: create server demo-x: unable to authenticate (unauthorized)`), ReasonProviderAuth, Stalling},
		{"hetzner down through the CLI", errors.New(`error: ... (service_error)`), ReasonHetznerUnavailable, Waiting},
		{"concurrent update", errors.New(`error: [409] Conflict: Another update is currently in progress.`), ReasonUpdateConflict, Waiting},
		{"diy lock", errors.New("error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or delete the lock file with `pulumi cancel`."), ReasonUpdateConflict, Waiting},
		{"live lock here", fmt.Errorf("demo/x: %w (pid 1)", ErrUpdateInProgress), ReasonUpdateConflict, Waiting},
		{"lock of another host", fmt.Errorf("demo/x: %w", ErrLockedElsewhere), ReasonStackLocked, Waiting},
		{"pending operations", errors.New("warning: Attempting to deploy or update resources with 1 pending operations from previous deployment."), ReasonPendingOperations, Generic},
		{"passphrase", errors.New("error: constructing secrets manager of type \"passphrase\": incorrect passphrase"), ReasonPassphrase, Stalling},
		{"missing network", errors.New(`network "stands-net" does not exist in the Hetzner project`), ReasonMissingPrereq, Stalling},
		{"plugin", errors.New("error: no resource plugin 'pulumi-resource-stands' found in the workspace"), ReasonProviderMissing, Stalling},
		{"s3 down", errors.New("error: failed to open bucket s3://x: dial tcp 127.0.0.1:9: connect: connection refused"), ReasonBackendUnavailable, Waiting},
		{"unknown", errors.New("something else"), ReasonFailed, Generic},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Classify(c.err)
			if got.Reason != c.reason || got.Kind != c.kind {
				t.Errorf("Classify = %s/%s, want %s/%s", got.Reason, got.Kind, c.reason, c.kind)
			}
		})
	}
	if (Classify(nil) != Classification{}) {
		t.Error("nil error classified")
	}
}
