package hcloudsim

import (
	"crypto/md5"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
	"golang.org/x/crypto/ssh"
)

func (s *Sim) routeSSHKeys(m string, parts []string, q map[string][]string, body []byte) (any, *Error) {
	switch {
	case len(parts) == 0 && m == http.MethodGet:
		sel, e := filterLabels(q)
		if e != nil {
			return nil, e
		}
		name, fp := first(q, "name"), first(q, "fingerprint")
		var list []schema.SSHKey
		for _, k := range s.sortedKeys() {
			if (name != "" && k.Name != name) || (fp != "" && k.Fingerprint != fp) || !sel.matches(k.Labels) {
				continue
			}
			list = append(list, k.schema())
		}
		lo, hi, meta, e := page(q, len(list))
		if e != nil {
			return nil, e
		}
		return map[string]any{"ssh_keys": nonNil(list[lo:hi]), "meta": meta}, nil
	case len(parts) == 0 && m == http.MethodPost:
		var req schema.SSHKeyCreateRequest
		if e := decode(body, &req); e != nil {
			return nil, e
		}
		if req.Name == "" {
			return nil, invalidInput("name", "is required")
		}
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(req.PublicKey))
		if err != nil {
			return nil, invalidInput("public_key", "invalid public key")
		}
		fp := md5Fingerprint(pub)
		for _, k := range s.st.SSHKeys {
			if k.Name == req.Name {
				return nil, uniqueness("name", "SSH key with the same name already exists")
			}
			if k.Fingerprint == fp {
				return nil, uniqueness("public_key", "SSH key with the same fingerprint already exists")
			}
		}
		k := &sshKey{ID: s.st.id(), Name: req.Name, Fingerprint: fp, PublicKey: strings.TrimSpace(req.PublicKey), Labels: map[string]string{}, Created: s.now()}
		if req.Labels != nil {
			if err := validLabels(*req.Labels); err != nil {
				return nil, invalidInput("labels", err.Error())
			}
			k.Labels = *req.Labels
		}
		s.st.SSHKeys[k.ID] = k
		return schema.SSHKeyCreateResponse{SSHKey: k.schema()}, nil
	}
	id, ok := parseID(parts[0])
	k := s.st.SSHKeys[id]
	if !ok || k == nil || len(parts) != 1 {
		return nil, notFound("ssh_key", parts[0])
	}
	switch m {
	case http.MethodGet:
		return schema.SSHKeyGetResponse{SSHKey: k.schema()}, nil
	case http.MethodPut:
		var req schema.SSHKeyUpdateRequest
		if e := decode(body, &req); e != nil {
			return nil, e
		}
		if req.Name != "" {
			k.Name = req.Name
		}
		if req.Labels != nil {
			if err := validLabels(*req.Labels); err != nil {
				return nil, invalidInput("labels", err.Error())
			}
			k.Labels = *req.Labels
		}
		return schema.SSHKeyUpdateResponse{SSHKey: k.schema()}, nil
	case http.MethodDelete:
		delete(s.st.SSHKeys, id)
		return nil, nil
	}
	return nil, apiErr(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed")
}

func (s *Sim) sortedKeys() []*sshKey {
	l := make([]*sshKey, 0, len(s.st.SSHKeys))
	for _, k := range s.st.SSHKeys {
		l = append(l, k)
	}
	slices.SortFunc(l, func(a, b *sshKey) int { return int(a.ID - b.ID) })
	return l
}

func (k *sshKey) schema() schema.SSHKey {
	return schema.SSHKey{ID: k.ID, Name: k.Name, Fingerprint: k.Fingerprint, PublicKey: k.PublicKey, Labels: k.Labels, Created: k.Created}
}

// md5Fingerprint is the colon-separated MD5 fingerprint the API shows for SSH keys.
func md5Fingerprint(pub ssh.PublicKey) string {
	sum := md5.Sum(pub.Marshal())
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02x", b)
	}
	return strings.Join(parts, ":")
}

func (s *Sim) routeServerTypes(m string, parts []string, q map[string][]string) (any, *Error) {
	return catalogRoute(m, parts, q, "server_type", "server_types", serverTypes,
		func(t serverTypeInfo) int64 { return t.id }, func(t serverTypeInfo) string { return t.name },
		func(t serverTypeInfo) any { return t.schema() }, nil)
}

func (s *Sim) routeImages(m string, parts []string, q map[string][]string) (any, *Error) {
	arch := first(q, "architecture")
	return catalogRoute(m, parts, q, "image", "images", images,
		func(i imageInfo) int64 { return i.id }, func(i imageInfo) string { return i.name },
		func(i imageInfo) any { return i.schema() },
		func(i imageInfo) bool { return arch == "" || i.arch == arch })
}

func (s *Sim) routeLocations(m string, parts []string, q map[string][]string) (any, *Error) {
	return catalogRoute(m, parts, q, "location", "locations", locations,
		func(l locationInfo) int64 { return l.id }, func(l locationInfo) string { return l.name },
		func(l locationInfo) any { return l.schema() }, nil)
}

// catalogRoute serves a read-only collection: list (?name=, paginated) and get by id.
func catalogRoute[T any](m string, parts []string, q map[string][]string, one, many string, items []T,
	id func(T) int64, name func(T) string, render func(T) any, keep func(T) bool) (any, *Error) {
	if m != http.MethodGet {
		return nil, apiErr(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed")
	}
	if len(parts) == 1 {
		want, ok := parseID(parts[0])
		for _, it := range items {
			if ok && id(it) == want {
				return map[string]any{one: render(it)}, nil
			}
		}
		return nil, notFound(one, parts[0])
	}
	n := first(q, "name")
	var list []any
	for _, it := range items {
		if (n == "" || name(it) == n) && (keep == nil || keep(it)) {
			list = append(list, render(it))
		}
	}
	lo, hi, meta, e := page(q, len(list))
	if e != nil {
		return nil, e
	}
	return map[string]any{many: nonNil(list[lo:hi]), "meta": meta}, nil
}
