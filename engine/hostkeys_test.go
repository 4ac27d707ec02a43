package engine

import (
	"io"
	"mime"
	"mime/multipart"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestUserDataCarriesTheHostKey: a server's user data is a multipart document cloud-init reads: the
// engine's part first (the host key, no other key type generated), then the stand's template as it is.
func TestUserDataCarriesTheHostKey(t *testing.T) {
	private, public, err := newEd25519("test")
	if err != nil {
		t.Fatal(err)
	}
	stand := "#cloud-config\nhostname: web\nruncmd:\n  - echo hi\n"
	doc := userData(hostKey{private: private, public: public}, []byte(stand))
	head, body, _ := strings.Cut(doc, "\n\n")
	_, params, err := mime.ParseMediaType(strings.TrimPrefix(strings.SplitN(head, "\n", 2)[0], "Content-Type: "))
	if err != nil {
		t.Fatal(err)
	}
	r := multipart.NewReader(strings.NewReader(body), params["boundary"])
	var parts []string
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ct := p.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/cloud-config") {
			t.Errorf("part content type %q", ct)
		}
		data, _ := io.ReadAll(p)
		parts = append(parts, string(data))
	}
	if len(parts) != 2 || strings.TrimSpace(parts[1]) != strings.TrimSpace(stand) {
		t.Fatalf("parts: %q", parts)
	}
	var ours struct {
		Gen  []string          `yaml:"ssh_genkeytypes"`
		Keys map[string]string `yaml:"ssh_keys"`
	}
	if err := yaml.Unmarshal([]byte(parts[0]), &ours); err != nil || !strings.HasPrefix(parts[0], "#cloud-config\n") {
		t.Fatalf("the engine's part: %v\n%s", err, parts[0])
	}
	if ours.Gen == nil || len(ours.Gen) != 0 || strings.TrimSpace(ours.Keys["ed25519_private"]) != strings.TrimSpace(private) || ours.Keys["ed25519_public"] != public {
		t.Errorf("the engine's part: %+v", ours)
	}
}
