// Package hetzner is the engine's cloud (package cloud) on the Hetzner Cloud API, through hcloud-go:
// the provider's servers, the engine's orphans, sweeps, prices and adoption. Tests point it at
// hcloudsim with WithEndpoint, exactly as production points it at Hetzner.
package hetzner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/stands-engine/stands-reconciler/engine/cloud"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// HTTPTimeout bounds every request to the API: a hung endpoint fails the call, which the engine's
// retries and the operation's deadline then handle, instead of freezing it.
const HTTPTimeout = 60 * time.Second

// Cloud is a Hetzner Cloud project.
type Cloud struct{ c *hcloud.Client }

var _ cloud.Cloud = (*Cloud)(nil)

// Option tunes New.
type Option func(*options)

type options struct{ endpoint, app string }

// WithEndpoint is the API's address (hcloudsim's in tests); "" is Hetzner's own.
func WithEndpoint(url string) Option { return func(o *options) { o.endpoint = url } }

// WithApplication names the caller in the API's user agent.
func WithApplication(version string) Option { return func(o *options) { o.app = version } }

// New is the project the token opens.
func New(token string, opts ...Option) *Cloud {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	co := []hcloud.ClientOption{hcloud.WithToken(token), hcloud.WithApplication("stands-reconciler", o.app),
		hcloud.WithHTTPClient(&http.Client{Timeout: HTTPTimeout})}
	if o.endpoint != "" {
		co = append(co, hcloud.WithEndpoint(o.endpoint))
	}
	return &Cloud{c: hcloud.NewClient(co...)}
}

func (h *Cloud) Server(ctx context.Context, id int64) (*cloud.Server, error) {
	srv, _, err := h.c.Server.GetByID(ctx, id)
	if err != nil {
		return nil, wrap(err)
	}
	return serverOf(srv), nil
}

func (h *Cloud) ServerByName(ctx context.Context, name string) (*cloud.Server, error) {
	srv, _, err := h.c.Server.GetByName(ctx, name)
	if err != nil {
		return nil, wrap(err)
	}
	return serverOf(srv), nil
}

func (h *Cloud) Servers(ctx context.Context, labels map[string]string) ([]*cloud.Server, error) {
	var sel []string
	for k, v := range labels {
		sel = append(sel, k+"="+v)
	}
	sort.Strings(sel)
	servers, err := h.c.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: strings.Join(sel, ",")}})
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]*cloud.Server, 0, len(servers))
	for _, s := range servers {
		out = append(out, serverOf(s))
	}
	return out, nil
}

func (h *Cloud) Network(ctx context.Context, name string) (*cloud.Network, error) {
	n, _, err := h.c.Network.GetByName(ctx, name)
	if err != nil {
		return nil, wrap(err)
	}
	if n == nil {
		return nil, nil
	}
	out := &cloud.Network{ID: n.ID, Name: n.Name}
	if n.IPRange != nil {
		out.IPRange = n.IPRange.String()
	}
	return out, nil
}

func (h *Cloud) SSHKey(ctx context.Context, name string) (*cloud.SSHKey, error) {
	k, _, err := h.c.SSHKey.GetByName(ctx, name)
	if err != nil {
		return nil, wrap(err)
	}
	if k == nil {
		return nil, nil
	}
	return &cloud.SSHKey{ID: k.ID, Name: k.Name}, nil
}

func (h *Cloud) CreateServer(ctx context.Context, o cloud.CreateOptions) (*cloud.Server, error) {
	opts := hcloud.ServerCreateOpts{
		Name: o.Name, ServerType: &hcloud.ServerType{Name: o.Type}, Image: &hcloud.Image{Name: o.Image},
		Location: &hcloud.Location{Name: o.Location}, UserData: o.UserData, Labels: o.Labels,
	}
	if o.SSHKey != nil {
		opts.SSHKeys = []*hcloud.SSHKey{{ID: o.SSHKey.ID, Name: o.SSHKey.Name}}
	}
	if o.Network != nil {
		opts.Networks = []*hcloud.Network{{ID: o.Network.ID, Name: o.Network.Name}}
	}
	res, _, err := h.c.Server.Create(ctx, opts)
	if hcloud.IsError(err, hcloud.ErrorCodeUniquenessError) {
		return nil, reason.Wrap(reason.MissingPrereq, fmt.Errorf("create server %s: %w: %w", o.Name, cloud.ErrNameTaken, err))
	}
	if err != nil {
		return nil, wrap(fmt.Errorf("create server %s: %w", o.Name, err))
	}
	created := &cloud.Server{ID: res.Server.ID, Name: o.Name}
	if err := h.c.Action.WaitFor(ctx, append([]*hcloud.Action{res.Action}, res.NextActions...)...); err != nil {
		return created, wrap(fmt.Errorf("create server %s: %w", o.Name, err))
	}
	srv, _, err := h.c.Server.GetByID(ctx, res.Server.ID)
	if err != nil || srv == nil {
		return created, wrap(fmt.Errorf("read created server %s: %v", o.Name, err))
	}
	return serverOf(srv), nil
}

func (h *Cloud) Attach(ctx context.Context, srv *cloud.Server, network *cloud.Network) (*cloud.Server, error) {
	a, _, err := h.c.Server.AttachToNetwork(ctx, &hcloud.Server{ID: srv.ID}, hcloud.ServerAttachToNetworkOpts{Network: &hcloud.Network{ID: network.ID, Name: network.Name}})
	if err == nil {
		err = h.c.Action.WaitFor(ctx, a)
	}
	if err != nil {
		return nil, wrap(fmt.Errorf("attach server %s to network %s: %w", srv.Name, network.Name, err))
	}
	got, _, err := h.c.Server.GetByID(ctx, srv.ID)
	if err != nil || got == nil {
		return nil, wrap(fmt.Errorf("read server %s: %v", srv.Name, err))
	}
	return serverOf(got), nil
}

func (h *Cloud) SetLabels(ctx context.Context, id int64, labels map[string]string) error {
	if _, _, err := h.c.Server.Update(ctx, &hcloud.Server{ID: id}, hcloud.ServerUpdateOpts{Labels: labels}); err != nil {
		return wrap(err)
	}
	return nil
}

func (h *Cloud) Resize(ctx context.Context, id int64, to string) error {
	return wrap(h.resize(ctx, id, to))
}

// resize shuts the server down (gracefully, then powered off if it does not stop), changes the type
// without upgrading the disk, and powers it on.
func (h *Cloud) resize(ctx context.Context, id int64, to string) error {
	srv := &hcloud.Server{ID: id}
	wait := func(a *hcloud.Action, _ *hcloud.Response, err error) error {
		if err != nil {
			return err
		}
		return h.c.Action.WaitFor(ctx, a)
	}
	if err := wait(h.c.Server.Shutdown(ctx, srv)); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		s, _, err := h.c.Server.GetByID(ctx, id)
		if err != nil {
			return fmt.Errorf("read server: %w", err)
		}
		if s != nil && s.Status == hcloud.ServerStatusOff {
			break
		}
		if time.Now().After(deadline) {
			if err := wait(h.c.Server.Poweroff(ctx, srv)); err != nil {
				return fmt.Errorf("power off after the shutdown did not stop it: %w", err)
			}
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if err := wait(h.c.Server.ChangeType(ctx, srv, hcloud.ServerChangeTypeOpts{ServerType: &hcloud.ServerType{Name: to}, UpgradeDisk: false})); err != nil {
		// Powered on again either way: a refused resize (a disk too large for the type) must not
		// leave the stand's server off.
		_ = wait(h.c.Server.Poweron(ctx, srv))
		return fmt.Errorf("change type: %w", err)
	}
	if err := wait(h.c.Server.Poweron(ctx, srv)); err != nil {
		return fmt.Errorf("power on: %w", err)
	}
	return nil
}

func (h *Cloud) DeleteServer(ctx context.Context, id int64) error {
	res, _, err := h.c.Server.DeleteWithResult(ctx, &hcloud.Server{ID: id})
	if hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		return nil // already gone: the goal is reached
	}
	if err == nil {
		err = h.c.Action.WaitFor(ctx, res.Action)
	}
	return wrap(err)
}

func (h *Cloud) Prices(ctx context.Context) (stands.Prices, error) {
	types, err := h.c.ServerType.All(ctx)
	if err != nil {
		return nil, wrap(fmt.Errorf("list server types: %w", err))
	}
	out := stands.Prices{}
	for _, t := range types {
		out[t.Name] = map[string]stands.Price{}
		for _, p := range t.Pricings {
			if p.Location == nil {
				continue
			}
			gross, err := strconv.ParseFloat(p.Monthly.Gross, 64)
			if err != nil {
				continue
			}
			cur := p.Monthly.Currency
			if cur == "" {
				cur = "EUR" // server type prices carry no currency; Hetzner bills in euros
			}
			out[t.Name][p.Location.Name] = stands.Price{Monthly: gross, Currency: cur}
		}
	}
	return out, nil
}

func serverOf(s *hcloud.Server) *cloud.Server {
	if s == nil {
		return nil
	}
	out := &cloud.Server{ID: s.ID, Name: s.Name, Labels: s.Labels, Created: s.Created}
	if s.ServerType != nil {
		out.Type = s.ServerType.Name
	}
	if s.Image != nil {
		out.Image = s.Image.Name
	}
	if s.Location != nil {
		out.Location = s.Location.Name
	}
	if ip := s.PublicNet.IPv4.IP; ip != nil && !s.PublicNet.IPv4.IsUnspecified() {
		out.PublicIPv4 = ip.String()
	}
	for _, p := range s.PrivateNet {
		if p.Network != nil {
			out.Private = append(out.Private, cloud.Attachment{NetworkID: p.Network.ID, IP: p.IP.String()})
		}
	}
	return out
}

// reasons are the API's error codes the engine decides on: the token refused, the rate limit, an
// outage on Hetzner's side, a request the project cannot satisfy as it is.
var reasons = []struct {
	reason reason.Reason
	codes  []hcloud.ErrorCode
}{
	{reason.ProviderAuth, []hcloud.ErrorCode{hcloud.ErrorCodeUnauthorized, hcloud.ErrorCodeForbidden, "token_readonly"}},
	{reason.RateLimited, []hcloud.ErrorCode{hcloud.ErrorCodeRateLimitExceeded}},
	{reason.CloudUnavailable, []hcloud.ErrorCode{hcloud.ErrorCodeServiceError, hcloud.ErrorCodeMaintenance, hcloud.ErrorCodeTimeout,
		hcloud.ErrorCodeServerError, hcloud.ErrorCodeResourceUnavailable}},
	{reason.MissingPrereq, []hcloud.ErrorCode{hcloud.ErrorCodeUniquenessError, hcloud.ErrorCodeInvalidInput, "unsupported_location_for_server_type"}},
}

// wrap gives an API error its reason; others are left for the engine to classify.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var known *reason.Error
	if errors.As(err, &known) {
		return err
	}
	for _, r := range reasons {
		if hcloud.IsError(err, r.codes...) {
			return reason.Wrap(r.reason, err)
		}
	}
	return err
}
