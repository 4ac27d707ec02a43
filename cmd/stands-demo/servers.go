package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"code.gitea.io/sdk/gitea"

	"github.com/stands-engine/stands-reconciler/hcloudsim/vm"
	"github.com/stands-engine/stands-reconciler/internal/localserver"
)

// Who is who in the demo's Gitea.
const (
	adminName    = "demo"       // owns the stands repository and opens the pull request
	reviewerName = "reviewer"   // approves and merges it
	leadName     = "lead"       // a second reviewer, whose approval counts where the first's does not
	botName      = "stands-bot" // the reconciler: status commits, commit statuses, plan comments
	statusBranch = "status"     // where the bot commits status: main takes no push, only merges
	repoName     = "stands"
	owner        = "team" // the reconciler's --owner: stand ids are team_<project>_<env>
)

// demo is everything the story runs against.
type demo struct {
	p   *paths
	out io.Writer // the story

	gitea    *localserver.Gitea
	vault    *localserver.Vault
	reg      *localserver.Registry // DEMO_NODES=full: the apps' images
	images   []string              // … the example's, repository:tag
	sim      *localserver.Process
	rec      *localserver.Process
	api      *gitea.Client // as the admin
	reviewer *localserver.User
	lead     *localserver.User
	bot      *localserver.User
	hookKey  string
	simURL   string // hcloudsim's endpoint
	simToken string
	listen   string   // the reconciler's listener
	progress progress // the reconciler's log, followed

	mergeCommit string // of the story's pull request
}

// start brings up Gitea, Vault, hcloudsim and the reconciler, in that order; stop ends whatever did
// start.
func (d *demo) start(ctx context.Context) error {
	type step struct {
		what string
		fn   func(context.Context) error
	}
	steps := []step{
		{"Gitea: an admin, two reviewers and the reconciler's bot", d.startGitea},
		{"the stands repository: the example pushed, main protected (stands/plan and an approval), a webhook", d.pushRepository},
		{"Vault: the example's secrets, an AppRole for the reconciler", d.startVault},
		{"hcloudsim: a simulated Hetzner project, servers only (records, not machines)", d.startHetzner},
		{"the reconciler: bin/stands-reconciler run, as the bot", d.startReconciler},
	}
	if d.p.full {
		steps[3].what = "hcloudsim: a simulated Hetzner project whose servers are QEMU VMs (" + vm.DefaultDir() + "/img)"
		steps = slices.Insert(steps, 3, step{"a registry: the example's images (stands-testapp under each name), behind its login", d.startRegistry})
	}
	for _, s := range steps {
		t0 := time.Now()
		fmt.Fprintf(d.out, "  %s…", s.what)
		if err := s.fn(ctx); err != nil {
			fmt.Fprintln(d.out, " failed")
			return fmt.Errorf("%s: %w", strings.SplitN(s.what, ":", 2)[0], err)
		}
		fmt.Fprintf(d.out, " %.1fs\n", time.Since(t0).Seconds())
	}
	return nil
}

func (d *demo) stop() {
	if d.rec != nil {
		// The reconciler drains: a running apply finishes (its --drain-timeout), then Pulumi is
		// interrupted and given time to write its state.
		d.rec.StopWithin(90 * time.Second)
	}
	if d.sim != nil {
		d.sim.Stop()
	}
	endVMs(d.p, io.Discard) // DEMO_NODES=full: they outlive hcloudsim, whose restart would reattach them
	if d.reg != nil {
		d.reg.Stop()
	}
	if d.vault != nil {
		d.vault.Stop()
	}
	if d.gitea != nil {
		d.gitea.Stop()
	}
}

func (d *demo) startGitea(ctx context.Context) error {
	root, err := giteaStaticRoot(d.p.bin)
	if err != nil {
		return err
	}
	httpPort, err := localserver.FreePort()
	if err != nil {
		return err
	}
	sshPort, err := localserver.FreePort()
	if err != nil {
		return err
	}
	dir := d.p.join("gitea")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	d.gitea, err = localserver.NewGitea(ctx, localserver.GiteaConfig{Bin: filepath.Join(d.p.bin, "gitea"), StaticRoot: root,
		Dir: dir, HTTPPort: httpPort, SSHPort: sshPort, AppName: "stands demo", Admin: adminName})
	if err != nil {
		return err
	}
	if err := record(d.p, "gitea", d.gitea.Pid()); err != nil {
		return err
	}
	if d.api, err = d.gitea.API(); err != nil {
		return err
	}
	if d.reviewer, err = d.gitea.CreateUser(reviewerName); err != nil {
		return err
	}
	if d.lead, err = d.gitea.CreateUser(leadName); err != nil {
		return err
	}
	d.bot, err = d.gitea.CreateUser(botName)
	return err
}

func (d *demo) startVault(ctx context.Context) error {
	dir := d.p.join("vault")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var err error
	if d.vault, err = localserver.NewVault(ctx, filepath.Join(d.p.bin, "vault"), dir); err != nil {
		return err
	}
	if err := record(d.p, "vault", d.vault.Pid()); err != nil {
		return err
	}
	secrets, err := exampleSecrets(d.p)
	if err != nil {
		return err
	}
	for name, value := range secrets {
		if _, err := d.vault.Client().KVv2("secret").Put(ctx, "stands/"+name, map[string]any{"value": value}); err != nil {
			return fmt.Errorf("write secret %s: %w", name, err)
		}
	}
	return nil
}

func (d *demo) startHetzner(ctx context.Context) error {
	port, err := localserver.FreePort()
	if err != nil {
		return err
	}
	d.simToken = "demo-hcloud-" + localserver.RandomHex(8)
	tokenFile, err := secretFile(d.p, "hcloud-token", d.simToken)
	if err != nil {
		return err
	}
	// Action delays of a second: Hetzner's are tens of seconds, which would only make the demo wait.
	args := []string{"-listen", fmt.Sprintf("127.0.0.1:%d", port), "-example-project", "-state", d.p.join("hcloudsim", "state.json"), "-action-delay", "1s"}
	env := []string{"HCLOUDSIM_TOKEN_FILE=" + tokenFile, "PATH=/usr/bin:/bin"}
	if d.p.full {
		args = append(args, "-machine", "vm", "-vm-dir", d.p.vmDir(), "-vm-registry", d.reg.Addr)
		env = append(env, "STANDS_VM_DIR="+vm.DefaultDir())
	}
	d.sim, err = startServer(d.p, "hcloudsim", env, args...)
	if err != nil {
		return err
	}
	d.simURL = fmt.Sprintf("http://127.0.0.1:%d/v1", port)
	return waitHTTP(ctx, d.sim, d.simURL+"/servers", d.simToken, 200, 30*time.Second)
}

// giteaStaticRoot is Gitea's module folder with its web front end built (scripts/gitea-frontend.sh),
// else the bare module folder `make tools` records: its pages then come without stylesheets.
func giteaStaticRoot(bin string) (string, error) {
	web := filepath.Join(bin, "gitea-web")
	if _, err := os.Stat(filepath.Join(web, ".built")); err == nil {
		return web, nil
	}
	root, err := os.ReadFile(filepath.Join(bin, "gitea.static-root"))
	if err != nil {
		return "", fmt.Errorf("%w: run `make tools`", err)
	}
	return strings.TrimSpace(string(root)), nil
}
