package manifest

import (
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"maps"
	"strconv"
	"sync"
)

// Reads is what the judgement of one stand read of a repository: every file, folder listing and
// stat it asked for, each with a digest of the answer (the error too). A stand whose reads all
// answer the same in another commit's files is the same stand there, whatever else the commit
// changed: its judgement can be kept (PreflightOptions.Previous). What reads the stand's files
// later (the spec hash, a plan's render, an apply) reads them through FS, so each read counts.
type Reads struct {
	mu   sync.Mutex
	seen map[readKey][sha256.Size]byte
}

type readKey struct {
	op   byte // 'o' open or read, 's' stat, 'd' folder listing
	name string
}

// FS is fsys read on behalf of the stand: each read is recorded.
func (r *Reads) FS(fsys fs.FS) fs.FS {
	if rec, ok := fsys.(recordingFS); ok {
		fsys = rec.fsys
	}
	return recordingFS{fsys: guardResources(fsys), reads: r}
}

// Len is how many distinct reads were recorded.
func (r *Reads) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// sameIn is a copy of the record for a judgement of fsys that keeps the stand, when every recorded
// read answers the same there. A copy, not the record: what reads the stand's files through the
// judgement of one tree must not write its answers into the record another tree's judgement keeps
// (a pull request's tree into the tracked branch's, and the next commit would keep a spec hash of
// files it does not hold).
func (r *Reads) sameIn(fsys fs.FS) (*Reads, bool) {
	if rec, ok := fsys.(recordingFS); ok {
		fsys = rec.fsys
	}
	fsys = guardResources(fsys)
	r.mu.Lock()
	seen := maps.Clone(r.seen)
	r.mu.Unlock()
	if len(seen) == 0 {
		return nil, false // nothing recorded: nothing shows the stand is the same
	}
	for k, want := range seen {
		if answer(fsys, k) != want {
			return nil, false
		}
	}
	return &Reads{seen: seen}, true
}

func (r *Reads) record(k readKey, sum [sha256.Size]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[readKey][sha256.Size]byte{}
	}
	r.seen[k] = sum
}

// answer is the digest of what fsys answers to a read. Errors enter it by their kind, not their
// text (a path error's text names the path, which the key holds already).
func answer(fsys fs.FS, k readKey) [sha256.Size]byte {
	h := sha256.New()
	switch k.op {
	case 'o':
		data, err := fs.ReadFile(fsys, k.name)
		if err == nil {
			h.Write([]byte("file\x00"))
			h.Write(data)
			break
		}
		entries, derr := fs.ReadDir(fsys, k.name)
		if derr != nil {
			h.Write([]byte("error\x00" + errKind(err)))
			break
		}
		h.Write([]byte("folder\x00"))
		listing(h, entries)
	case 's':
		st, err := fs.Stat(fsys, k.name)
		if err != nil {
			h.Write([]byte("error\x00" + errKind(err)))
			break
		}
		// The type and the size, not the permissions: two trees of the same files may give them
		// differently (a merge of two commits is put together in memory).
		h.Write([]byte(st.Mode().Type().String() + "\x00" + strconv.FormatInt(st.Size(), 10)))
	case 'd':
		entries, err := fs.ReadDir(fsys, k.name)
		if err != nil {
			h.Write([]byte("error\x00" + errKind(err)))
			break
		}
		listing(h, entries)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

func listing(w io.Writer, entries []fs.DirEntry) {
	for _, e := range entries {
		io.WriteString(w, e.Name()+"\x00"+e.Type().String()+"\x00")
	}
}

// errKind is what a read's error says, without the path.
func errKind(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

// recordingFS reads fsys and records each read in reads. Each read is answered from fsys as it
// would be without it; the recording costs a second read, of a file the tree holds in memory.
type recordingFS struct {
	fsys  fs.FS
	reads *Reads
}

func (r recordingFS) note(op byte, name string) {
	k := readKey{op, name}
	r.reads.record(k, answer(r.fsys, k))
}

func (r recordingFS) Open(name string) (fs.File, error) {
	r.note('o', name)
	return r.fsys.Open(name)
}

func (r recordingFS) ReadFile(name string) ([]byte, error) {
	r.note('o', name)
	return fs.ReadFile(r.fsys, name)
}

func (r recordingFS) Stat(name string) (fs.FileInfo, error) {
	r.note('s', name)
	return fs.Stat(r.fsys, name)
}

func (r recordingFS) ReadDir(name string) ([]fs.DirEntry, error) {
	r.note('d', name)
	return fs.ReadDir(r.fsys, name)
}

// replay makes the read k on fsys again, for what records it.
func (k readKey) replay(fsys fs.FS) {
	switch k.op {
	case 'o':
		if f, err := fsys.Open(k.name); err == nil {
			f.Close()
		}
	case 's':
		fs.Stat(fsys, k.name)
	case 'd':
		fs.ReadDir(fsys, k.name)
	}
}

// trackingFS notes the reads made of fsys, in order.
type trackingFS struct {
	fsys  fs.FS
	reads []readKey
}

func (t *trackingFS) Open(name string) (fs.File, error) {
	t.reads = append(t.reads, readKey{'o', name})
	return t.fsys.Open(name)
}

func (t *trackingFS) ReadFile(name string) ([]byte, error) {
	t.reads = append(t.reads, readKey{'o', name})
	return fs.ReadFile(t.fsys, name)
}

func (t *trackingFS) Stat(name string) (fs.FileInfo, error) {
	t.reads = append(t.reads, readKey{'s', name})
	return fs.Stat(t.fsys, name)
}

func (t *trackingFS) ReadDir(name string) ([]fs.DirEntry, error) {
	t.reads = append(t.reads, readKey{'d', name})
	return fs.ReadDir(t.fsys, name)
}
