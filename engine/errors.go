package engine

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/stands-engine/stands-reconciler/engine/provider"
)

// Kind decides what the reconciler does after an error (STYLE.md, after Flux):
type Kind int

const (
	// Generic: retry with capped exponential backoff; after a few failures on the same spec the stand
	// is Stalled.
	Generic Kind = iota
	// Stalling: bad input or configuration; retrying cannot help until something changes.
	Stalling
	// Waiting: an outside service is down, busy or rate-limiting; retry later, never stall.
	Waiting
)

func (k Kind) String() string { return [...]string{"Generic", "Stalling", "Waiting"}[k] }

// Reason is the status reason an error maps to.
type Reason string

// Reasons.
const (
	ReasonUpdateConflict     Reason = "UpdateConflict"
	ReasonStackLocked        Reason = "StackLocked"
	ReasonPendingOperations  Reason = "PendingOperations"
	ReasonProviderAuth       Reason = "ProviderAuth"
	ReasonRateLimited        Reason = "RateLimited"
	ReasonHetznerUnavailable Reason = "HetznerUnavailable"
	ReasonBackendUnavailable Reason = "BackendUnavailable"
	ReasonPassphrase         Reason = "Passphrase"
	ReasonNotOwned           Reason = "NotOwned"
	ReasonProtected          Reason = "Protected"
	ReasonMissingPrereq      Reason = "MissingPrerequisite"
	ReasonProviderMissing    Reason = "ProviderMissing"
	ReasonCanceled           Reason = "Canceled"
	ReasonFailed             Reason = "Failed"
)

// isCheckpointLoad reports whether the CLI failed to read the stack's checkpoint.
func isCheckpointLoad(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "failed to load checkpoint")
}

// Classification is what an error means to the reconciler.
type Classification struct {
	Reason Reason
	Kind   Kind
}

// rule maps an error to a classification: by type first, by the Pulumi CLI's text otherwise (the CLI
// reports through its output, not through types). This file is the only place that matches error text.
type rule struct {
	reason Reason
	kind   Kind
	is     func(error) bool
	texts  []string // lower-case substrings of the error text
}

var rules = []rule{
	{reason: ReasonCanceled, kind: Waiting, is: func(err error) bool { return errors.Is(err, context.Canceled) }},
	{reason: ReasonProtected, kind: Stalling, is: func(err error) bool { return errors.Is(err, ErrProtected) }},
	{reason: ReasonNotOwned, kind: Stalling, is: func(err error) bool {
		return errors.Is(err, ErrNotOwned) || errors.Is(err, provider.ErrNotOurs)
	}, texts: []string{"not managed by stands-reconciler", "is not owned by stands-reconciler"}},
	{reason: ReasonProviderAuth, kind: Stalling, is: hcloudCode(hcloud.ErrorCodeUnauthorized, hcloud.ErrorCodeForbidden, "token_readonly"),
		texts: []string{"(unauthorized)", "unable to authenticate", "(token_readonly)", "the stands provider is not configured"}},
	{reason: ReasonRateLimited, kind: Waiting, is: hcloudCode(hcloud.ErrorCodeRateLimitExceeded), texts: []string{"(rate_limit_exceeded)"}},
	{reason: ReasonHetznerUnavailable, kind: Waiting,
		is:    hcloudCode(hcloud.ErrorCodeServiceError, hcloud.ErrorCodeMaintenance, hcloud.ErrorCodeTimeout, hcloud.ErrorCodeServerError, hcloud.ErrorCodeResourceUnavailable),
		texts: []string{"(service_error)", "(unavailable)", "(maintenance)", "(timeout)", "(server_error)", "(resource_unavailable)"}},
	// Pulumi's diy backends report a concurrent update as a lock.
	{reason: ReasonUpdateConflict, kind: Waiting, is: func(err error) bool { return errors.Is(err, ErrUpdateInProgress) },
		texts: []string{"another update is currently in progress", "[409] conflict", "the stack is currently locked by"}},
	{reason: ReasonStackLocked, kind: Waiting, is: func(err error) bool { return errors.Is(err, ErrLockedElsewhere) }},
	{reason: ReasonPendingOperations, kind: Generic, texts: []string{"pending operations", "interrupted while creating", "interrupted while deleting"}},
	{reason: ReasonPassphrase, kind: Stalling, texts: []string{"incorrect passphrase", "passphrase must be set", "failed to decrypt"}},
	{reason: ReasonMissingPrereq, kind: Stalling, texts: []string{"does not exist in the hetzner project", "(uniqueness_error)", "(invalid_input)", "(unsupported_location_for_server_type)"}},
	{reason: ReasonProviderMissing, kind: Stalling, texts: []string{"no resource plugin 'pulumi-resource-stands'", "could not find plugin for provider 'stands'"}},
	{reason: ReasonBackendUnavailable, kind: Waiting, is: func(err error) bool {
		var ne net.Error
		return errors.As(err, &ne)
	}, texts: []string{"nosuchbucket", "could not reach", "connection refused", "no such host", "i/o timeout", "failed to open bucket", "tls handshake timeout"}},
}

func hcloudCode(codes ...hcloud.ErrorCode) func(error) bool {
	return func(err error) bool { return hcloud.IsError(err, codes...) }
}

// Classify maps an error of this package to a reason and a kind. Unknown errors are Generic/Failed.
func Classify(err error) Classification {
	if err == nil {
		return Classification{}
	}
	for _, r := range rules {
		if r.is != nil && r.is(err) {
			return Classification{r.reason, r.kind}
		}
	}
	text := strings.ToLower(err.Error())
	for _, r := range rules {
		for _, t := range r.texts {
			if strings.Contains(text, t) {
				return Classification{r.reason, r.kind}
			}
		}
	}
	return Classification{ReasonFailed, Generic}
}
