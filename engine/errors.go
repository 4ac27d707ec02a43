package engine

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/reason"
)

// isCheckpointLoad reports whether the CLI failed to read the stack's checkpoint.
func isCheckpointLoad(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "failed to load checkpoint")
}

// rule maps an error to a classification: by type first, by the Pulumi CLI's text otherwise (the CLI
// reports through its output, not through types). This file is the only place that matches error text.
type rule struct {
	reason reason.Reason
	is     func(error) bool
	texts  []string // lower-case substrings of the error text
}

var rules = []rule{
	{reason: reason.Canceled, is: func(err error) bool { return errors.Is(err, context.Canceled) }},
	{reason: reason.Protected, is: func(err error) bool { return errors.Is(err, ErrProtected) }},
	{reason: reason.NotOwned, is: func(err error) bool {
		return errors.Is(err, ErrNotOwned) || errors.Is(err, provider.ErrNotOurs)
	}, texts: []string{"not managed by stands-reconciler", "is not owned by stands-reconciler"}},
	// The cloud's errors carry their reason (engine/cloud), and the provider marks it in the text the
	// CLI shows (reason.Mark): no cloud's error codes are read here.
	{reason: reason.ProviderAuth, texts: []string{"the stands provider is not configured"}},
	// Pulumi's diy backends report a concurrent update as a lock.
	{reason: reason.UpdateConflict, is: func(err error) bool { return errors.Is(err, ErrUpdateInProgress) },
		texts: []string{"another update is currently in progress", "[409] conflict", "the stack is currently locked by"}},
	{reason: reason.StackLocked, is: func(err error) bool { return errors.Is(err, ErrLockedElsewhere) }},
	{reason: reason.PendingOperations, texts: []string{"pending operations", "interrupted while creating", "interrupted while deleting"}},
	{reason: reason.Passphrase, texts: []string{"incorrect passphrase", "passphrase must be set", "failed to decrypt"}},
	{reason: reason.ProviderMissing, texts: []string{"no resource plugin 'pulumi-resource-stands'", "could not find plugin for provider 'stands'"}},
	{reason: reason.BackendUnavailable, is: func(err error) bool {
		var ne net.Error
		return errors.As(err, &ne)
	}, texts: []string{"nosuchbucket", "could not reach", "connection refused", "no such host", "i/o timeout", "failed to open bucket", "tls handshake timeout",
		// a postgres:// backend: down, restarting, failing over, or refusing our credentials
		"state database", "failed to ping postgresql", "the database system is", "bad connection", "terminating connection", "password authentication failed"}},
}

// Classify maps an error of this package to its reason (the catalogue gives its kind). An error that
// already carries a reason keeps it; unknown errors are reason.Failure (Generic).
func Classify(err error) reason.Reason {
	var known *reason.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &known):
		return known.Reason
	}
	if r, ok := reason.Marked(err.Error()); ok {
		return r
	}
	for _, r := range rules {
		if r.is != nil && r.is(err) {
			return r.reason
		}
	}
	text := strings.ToLower(err.Error())
	for _, r := range rules {
		for _, t := range r.texts {
			if strings.Contains(text, t) {
				return r.reason
			}
		}
	}
	return reason.Failure
}

// classify gives an error leaving the engine its reason, so the loop decides retry, wait or stall
// from reason.Of without knowing the engine's errors. Every exported operation defers it.
func classify(err *error) {
	if *err != nil {
		*err = reason.Wrap(Classify(*err), *err)
	}
}
