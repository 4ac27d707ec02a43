package fakecloud

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/engine/cloud"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Client is the cloud's project, reached with one token: engine/cloud's Cloud on the fake's API.
type Client struct {
	endpoint, token string
	http            *http.Client
}

var _ cloud.Cloud = (*Client)(nil)

// Open is the cloud's cloud.Opener: what provider.WithCloud and engine.Config.Clouds are given.
func Open(token, endpoint string) cloud.Cloud {
	return &Client{endpoint: endpoint, token: token, http: &http.Client{Timeout: 30 * time.Second}}
}

// do sends a request and decodes its answer into out (when not nil). A 404 is errNotFound; the
// other refusals carry the reason the engine decides on, as engine/cloud asks of every cloud.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint+path, body)
	if err != nil {
		return err
	}
	req.Header.Set(tokenHeader, c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return reason.Wrap(reason.CloudUnavailable, fmt.Errorf("%s %s: %w", method, path, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e wireError
		_ = json.NewDecoder(resp.Body).Decode(&e)
		err := fmt.Errorf("%s %s: %s (%d)", method, path, e.Code, resp.StatusCode)
		switch resp.StatusCode {
		case http.StatusNotFound:
			return errNotFound
		case http.StatusUnauthorized:
			return reason.Wrap(reason.ProviderAuth, err)
		case http.StatusTooManyRequests:
			return reason.Wrap(reason.RateLimited, err)
		case http.StatusConflict:
			return reason.Wrap(reason.MissingPrereq, fmt.Errorf("%w: %w", cloud.ErrNameTaken, err))
		case http.StatusBadRequest:
			return reason.Wrap(reason.MissingPrereq, err)
		}
		return reason.Wrap(reason.CloudUnavailable, err)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// get is do for a read of one thing: nil, nil when there is none.
func get[T any](ctx context.Context, c *Client, path string) (*T, error) {
	var v T
	err := c.do(ctx, http.MethodGet, path, nil, &v)
	if errors.Is(err, errNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func (c *Client) Server(ctx context.Context, id int64) (*cloud.Server, error) {
	s, err := get[wireServer](ctx, c, fmt.Sprintf("/servers/%d", id))
	return serverOf(s), err
}

func (c *Client) ServerByName(ctx context.Context, name string) (*cloud.Server, error) {
	all, err := c.list(ctx, url.Values{"name": {name}})
	if err != nil || len(all) == 0 {
		return nil, err
	}
	return all[0], nil
}

func (c *Client) Servers(ctx context.Context, labels map[string]string) ([]*cloud.Server, error) {
	var sel []string
	for k, v := range labels {
		sel = append(sel, k+"="+v)
	}
	slices.Sort(sel)
	return c.list(ctx, url.Values{"selector": {strings.Join(sel, ",")}})
}

func (c *Client) list(ctx context.Context, q url.Values) ([]*cloud.Server, error) {
	var page struct {
		Servers []wireServer `json:"servers"`
	}
	if err := c.do(ctx, http.MethodGet, "/servers?"+q.Encode(), nil, &page); err != nil {
		return nil, err
	}
	out := make([]*cloud.Server, 0, len(page.Servers))
	for i := range page.Servers {
		out = append(out, serverOf(&page.Servers[i]))
	}
	return out, nil
}

func (c *Client) Network(ctx context.Context, name string) (*cloud.Network, error) {
	n, err := get[network](ctx, c, "/networks/"+url.PathEscape(name))
	if n == nil {
		return nil, err
	}
	return &cloud.Network{ID: n.ID, Name: n.Name, IPRange: n.IPRange}, nil
}

func (c *Client) SSHKey(ctx context.Context, name string) (*cloud.SSHKey, error) {
	k, err := get[struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}](ctx, c, "/keys/"+url.PathEscape(name))
	if k == nil {
		return nil, err
	}
	return &cloud.SSHKey{ID: k.ID, Name: k.Name}, nil
}

func (c *Client) CreateServer(ctx context.Context, o cloud.CreateOptions) (*cloud.Server, error) {
	in := wireCreate{Name: o.Name, Type: o.Type, Image: o.Image, Location: o.Location, Labels: o.Labels, UserData: o.UserData}
	if o.Network != nil {
		in.Network = o.Network.Name
	}
	if o.SSHKey != nil {
		in.SSHKey = o.SSHKey.ID
	}
	var s wireServer
	if err := c.do(ctx, http.MethodPost, "/servers", in, &s); err != nil {
		return nil, fmt.Errorf("create server %s: %w", o.Name, err)
	}
	return serverOf(&s), nil
}

func (c *Client) Attach(ctx context.Context, srv *cloud.Server, n *cloud.Network) (*cloud.Server, error) {
	var s wireServer
	if err := c.do(ctx, http.MethodPost, fmt.Sprintf("/servers/%d/networks", srv.ID), map[string]int64{"network": n.ID}, &s); err != nil {
		return nil, fmt.Errorf("attach server %s to network %s: %w", srv.Name, n.Name, err)
	}
	return serverOf(&s), nil
}

func (c *Client) SetLabels(ctx context.Context, id int64, labels map[string]string) error {
	return c.do(ctx, http.MethodPut, fmt.Sprintf("/servers/%d/labels", id), labels, nil)
}

func (c *Client) Resize(ctx context.Context, id int64, serverType string) error {
	return c.do(ctx, http.MethodPost, fmt.Sprintf("/servers/%d/type", id), map[string]string{"type": serverType}, nil)
}

func (c *Client) DeleteServer(ctx context.Context, id int64) error {
	if err := c.do(ctx, http.MethodDelete, fmt.Sprintf("/servers/%d", id), nil, nil); err != nil && !errors.Is(err, errNotFound) {
		return err
	}
	return nil
}

func (c *Client) Prices(ctx context.Context) (stands.Prices, error) {
	var page struct {
		Prices []wirePrice `json:"prices"`
	}
	if err := c.do(ctx, http.MethodGet, "/prices", nil, &page); err != nil {
		return nil, err
	}
	out := stands.Prices{}
	for _, p := range page.Prices {
		if out[p.Type] == nil {
			out[p.Type] = map[string]stands.Price{}
		}
		out[p.Type][p.Location] = stands.Price{Monthly: float64(p.Cents) / 100, Currency: p.Currency}
	}
	return out, nil
}

func serverOf(s *wireServer) *cloud.Server {
	if s == nil {
		return nil
	}
	out := &cloud.Server{ID: s.ID, Name: s.Name, Type: s.Type, Image: s.Image, Location: s.Location, Labels: s.Labels,
		PublicIPv4: s.IPv4, Created: s.Created}
	for _, a := range s.Private {
		out.Private = append(out.Private, cloud.Attachment{NetworkID: a.Network, IP: a.IP})
	}
	return out
}
