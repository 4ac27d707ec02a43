package engine

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// TestBackendLayoutContract holds statelayout.go to what the real Pulumi CLI writes, on the file://
// and the postgres:// backends: an update is stopped inside its program while the test reads its
// lock file where lockPrefix says it is, as lockFile decodes it; once it ends, the stack file is at
// stackKey and decodes as stackFile, its one history record is under historyPrefix and says an
// update succeeded, no lock is left, and Inventory (which reads all of them without the CLI) says
// the same. A Pulumi upgrade that moves or reshapes any of them fails here.
func TestBackendLayoutContract(t *testing.T) {
	for _, name := range []string{"file", "postgres"} {
		t.Run(name, func(t *testing.T) {
			pl := testenv.NewPulumi(t)
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{PulumiBin: pl.Bin, BackendURL: pl.BackendURL, Passphrase: pl.Passphrase, CloudToken: hcloudToken,
				ProviderBin: exe, WorkDir: t.TempDir(), Log: testenv.Logger(t), SkipNodes: true}
			if name == "postgres" {
				pg := testenv.StartPostgres(t)
				cfg.BackendURL, cfg.DBPassword = pg.BackendURL(), pg.PasswordFunc()
			}
			eng, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = eng.Close() })
			layoutContract(t, eng)
		})
	}
}

func layoutContract(t *testing.T, eng *Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ref := stands.StackRef{Project: "contract", Env: "dev"}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	program := func(pctx *pulumi.Context) error {
		pctx.Export("answer", pulumi.String("42"))
		once.Do(func() { close(entered) })
		<-release
		return nil
	}
	st, err := eng.stack(ctx, ref, program, true)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	started := time.Now()
	go func() { _, err := st.Up(ctx); done <- err }()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("the update ended before its program ran: %v", err)
	}
	b, closeBackend, err := eng.openBackend(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBackend()

	// While it runs: one lock file, where lockPrefix says, naming this process's host.
	locks, err := listKeys(ctx, b, lockPrefix(ref))
	if err != nil || len(locks) != 1 || lockFileStack(locks[0]) != "contract/dev" {
		close(release)
		t.Fatalf("lock files of the running update under %s: %v %v", lockPrefix(ref), locks, err)
	}
	data, err := readKey(ctx, b, locks[0])
	var l lockFile
	host, _ := os.Hostname()
	if err != nil || json.Unmarshal(data, &l) != nil || l.Pid <= 0 || l.Hostname != host || l.Timestamp.Before(started.Add(-time.Minute)) {
		t.Errorf("lock file %s: %q (%v) reads as %+v", locks[0], data, err, l)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("update: %v", err)
	}

	// Once it ended: no lock, the stack file, one history record of a successful update.
	if locks, err := listKeys(ctx, b, locksDir); err != nil || len(locks) != 0 {
		t.Errorf("lock files after the update: %v %v", locks, err)
	}
	keys, err := listKeys(ctx, b, stacksDir)
	if err != nil || !slices.Contains(keys, stackKey(ref)) {
		t.Fatalf("stack files under %s: %v %v, want %s", stacksDir, keys, err, stackKey(ref))
	}
	if p, e, ok := stackFileName(stackKey(ref)); !ok || p != ref.Project || e != ref.Env {
		t.Errorf("stackFileName(%s) = %s %s %v", stackKey(ref), p, e, ok)
	}
	data, err = readKey(ctx, b, stackKey(ref))
	var cp stackFile
	if err != nil || json.Unmarshal(data, &cp) != nil || cp.Checkpoint.Latest == nil || cp.Checkpoint.Latest.Manifest.Time.Before(started.Add(-time.Minute)) ||
		cp.Checkpoint.Latest.Secrets.Type != "passphrase" || len(cp.Checkpoint.Latest.Resources) == 0 {
		t.Errorf("stack file %s does not read as a checkpoint: %v, %.300s", stackKey(ref), err, data)
	}
	history, err := listKeys(ctx, b, historyPrefix(ref))
	records := slices.DeleteFunc(history, func(k string) bool { return !isHistory(k) })
	if err != nil || len(records) != 1 {
		t.Fatalf("update records under %s: %v %v", historyPrefix(ref), records, err)
	}
	data, err = readKey(ctx, b, records[0])
	var h historyEntry
	if err != nil || json.Unmarshal(data, &h) != nil || h.Kind != "update" || h.Result != "succeeded" {
		t.Errorf("update record %s: %+v (%v)", records[0], h, err)
	}
	inv := wait.Value(t, "the stack in the inventory", 10*time.Second, func() ([]stands.StackInfo, bool) {
		inv, err := eng.Inventory(ctx)
		return inv, err == nil && len(inv) == 1
	})
	if s := inv[0]; !s.Known || s.Locked || s.LastOperation != "update" || s.LastResult != "succeeded" || s.Resources == 0 || !strings.HasPrefix(s.LastUpdate, "20") {
		t.Errorf("inventory: %+v", s)
	}
}
