package vault

import (
	"context"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/stands-engine/stands-reconciler/internal/testenv"
	"github.com/stands-engine/stands-reconciler/vault/vaulttest"
)

// BenchmarkStandInVsReal measures what the stand-in saves a test over the real server: a start
// (ready for KV v2 reads, with a root token) and a KV v2 read. It prints real/stand-in ratios.
//
//	go test -run '^$' -bench StandInVsReal -benchtime 10x ./vault/
func BenchmarkStandInVsReal(b *testing.B) {
	perOp := map[string]time.Duration{}
	servers := map[string]func(b *testing.B) (addr, token string, stop func()){
		"stand-in": func(b *testing.B) (string, string, func()) {
			l := vaulttest.Serve(b, vaulttest.New())
			return l.Addr, l.Server.RootToken, l.Stop
		},
		"real": func(b *testing.B) (string, string, func()) {
			v := testenv.StartVault(b)
			return v.Addr, v.RootToken, func() { v.Stop(b) }
		},
	}
	for _, kind := range []string{"stand-in", "real"} {
		start := servers[kind]
		b.Run("start/"+kind, func(b *testing.B) {
			for b.Loop() {
				_, _, stop := start(b)
				stop()
			}
			perOp["start/"+kind] = b.Elapsed() / time.Duration(b.N)
		})
		b.Run("kv-read/"+kind, func(b *testing.B) {
			addr, tok, stop := start(b)
			defer stop()
			cfg := vaultapi.DefaultConfig()
			cfg.Address = addr
			c, err := vaultapi.NewClient(cfg)
			if err != nil {
				b.Fatal(err)
			}
			c.SetToken(tok)
			kv := c.KVv2("secret")
			ctx := context.Background()
			if _, err := kv.Put(ctx, "stands/k", map[string]any{"value": "v"}); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := kv.Get(ctx, "stands/k"); err != nil {
					b.Fatal(err)
				}
			}
			perOp["kv-read/"+kind] = b.Elapsed() / time.Duration(b.N)
		})
	}
	for _, op := range []string{"start", "kv-read"} {
		s, r := perOp[op+"/stand-in"], perOp[op+"/real"]
		if s > 0 {
			b.Logf("%-8s stand-in %12v  real %12v  real/stand-in %.1fx", op, s, r, float64(r)/float64(s))
		}
	}
}
