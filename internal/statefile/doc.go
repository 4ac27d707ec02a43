package statefile

import (
	"context"
	"os"
	"sync"
)

// Doc is a document kept in one file, behind the interface of a document replicas share
// (lease.Document): a process alone writes it, so its version is 1 once read and every save lands.
type Doc struct {
	path string
	mu   sync.Mutex
	read bool
	body []byte
}

// NewDoc keeps a document in path ("": in memory only).
func NewDoc(path string) *Doc { return &Doc{path: path} }

// Load reads the document, nil when it is at the known version (1, once read) or was never written.
func (d *Doc) Load(_ context.Context, known int64) ([]byte, int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.read && d.path != "" {
		data, err := os.ReadFile(d.path)
		switch {
		case os.IsNotExist(err):
		case err != nil:
			return nil, 0, err
		default:
			d.body = data
		}
	}
	d.read = true
	if known == 1 {
		return nil, 1, nil
	}
	return d.body, 1, nil
}

// Save writes body aside and renames it into place; it always lands.
func (d *Doc) Save(_ context.Context, body []byte, _ int64) (int64, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.body, d.read = body, true
	if d.path == "" {
		return 1, true, nil
	}
	err := writeFile(d.path, body)
	return 1, err == nil, err
}
