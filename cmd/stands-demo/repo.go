package main

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-billy/v5/util"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/prplan"
)

// pushRepository creates the stands repository with the example in it, gives the bot and the
// reviewer write access, protects main as the docs say (only the bot pushes; a merge needs a green
// stands/plan and an approval) and points a webhook at the reconciler.
func (d *demo) pushRepository(ctx context.Context) error {
	if _, _, err := d.api.CreateRepo(gitea.CreateRepoOption{Name: repoName, DefaultBranch: "main", Private: true,
		Description: "Stands of the demo team: one stand.yml per stand; status/ and STATUS.md are the reconciler's"}); err != nil {
		return fmt.Errorf("create repository: %w", err)
	}
	write, err := readTree(d.p.examples)
	if err != nil {
		return err
	}
	if d.p.full {
		if d.images, err = forVMs(write); err != nil {
			return fmt.Errorf("point the example at the demo's registry: %w", err)
		}
	}
	if _, err := d.push(ctx, "", "main", "The example stands", write); err != nil {
		return err
	}
	// The bot reads main's protection whole, which Gitea shows administrators only; the reviewers write.
	for u, mode := range map[string]gitea.AccessMode{botName: gitea.AccessModeAdmin, reviewerName: gitea.AccessModeWrite, leadName: gitea.AccessModeWrite} {
		if _, err := d.api.AddCollaborator(adminName, repoName, u, gitea.AddCollaboratorOption{Permission: &mode}); err != nil {
			return fmt.Errorf("add collaborator %s: %w", u, err)
		}
	}
	// Every safeguard of docs/pr-workflow.md#branch-protection, and stands/review required too: Gitea
	// then refuses a merge whose approvals the review gate would not count. Status goes to its own
	// branch, so nobody pushes to main and a status commit never makes a pull request outdated.
	if _, _, err := d.api.CreateBranchProtection(adminName, repoName, gitea.CreateBranchProtectionOption{RuleName: "main", BranchName: "main",
		EnableStatusCheck: true, StatusCheckContexts: []string{prplan.PlanContext, prplan.ReviewContext}, RequiredApprovals: 1, DismissStaleApprovals: true,
		BlockOnOutdatedBranch: true, BlockAdminMergeOverride: true}); err != nil {
		return fmt.Errorf("branch protection: %w", err)
	}
	port, err := localserver.FreePort()
	if err != nil {
		return err
	}
	d.listen = fmt.Sprintf("127.0.0.1:%d", port)
	d.hookKey = "demo-hook-" + localserver.RandomHex(16)
	if _, _, err := d.api.CreateRepoHook(adminName, repoName, gitea.CreateHookOption{Type: gitea.HookTypeGitea, Active: true,
		Events: []string{"push", "pull_request"}, BranchFilter: "*",
		Config: map[string]string{"url": "http://" + d.listen + "/webhook", "content_type": "json", "secret": d.hookKey}}); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	return nil
}

// push commits files onto from's head (a new history when from is empty) and pushes the commit to
// branch as the admin (a nil file is removed); it returns the commit.
func (d *demo) push(ctx context.Context, from, branch, msg string, files map[string][]byte) (string, error) {
	return d.pushAs(ctx, nil, from, branch, msg, files)
}

// pushAs is push by user (nil: the admin), who authors the commit.
func (d *demo) pushAs(ctx context.Context, user *localserver.User, from, branch, msg string, files map[string][]byte) (string, error) {
	name, auth := adminName, &githttp.BasicAuth{Username: adminName, Password: d.gitea.Token}
	if user != nil {
		name, auth = user.Name, &githttp.BasicAuth{Username: user.Name, Password: user.Token}
	}
	url := d.gitea.URL + adminName + "/" + repoName + ".git"
	var repo *git.Repository
	var err error
	if from == "" {
		if repo, err = git.Init(memory.NewStorage(), memfs.New()); err == nil {
			_, err = repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{url}})
		}
	} else {
		repo, err = git.CloneContext(ctx, memory.NewStorage(), memfs.New(), &git.CloneOptions{URL: url, Auth: auth,
			ReferenceName: plumbing.NewBranchReferenceName(from), SingleBranch: true})
	}
	if err != nil {
		return "", fmt.Errorf("clone %s: %w", from, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return "", err
	}
	for name, data := range files {
		if data == nil { // a removal
			if _, err := wt.Remove(name); err != nil {
				return "", fmt.Errorf("remove %s: %w", name, err)
			}
			continue
		}
		if err := wt.Filesystem.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return "", err
		}
		if err := util.WriteFile(wt.Filesystem, name, data, 0o644); err != nil {
			return "", err
		}
		if _, err := wt.Add(name); err != nil {
			return "", err
		}
	}
	h, err := wt.Commit(msg, &git.CommitOptions{Author: &object.Signature{Name: name, Email: name + "@example.test", When: time.Now()}})
	if err != nil {
		return "", err
	}
	spec := config.RefSpec(h.String() + ":refs/heads/" + branch)
	if err := repo.PushContext(ctx, &git.PushOptions{RemoteName: "origin", Auth: auth, RefSpecs: []config.RefSpec{spec}}); err != nil {
		return "", fmt.Errorf("push %s: %w", branch, err)
	}
	return h.String(), nil
}

// startReconciler runs `stands-reconciler run` on the repository as the bot, its secrets in files
// (as under systemd: none in its environment or argv), Vault through an AppRole under the policy the
// docs give operators; servers only, or with node setup and apps on VMs (DEMO_NODES=full).
func (d *demo) startReconciler(ctx context.Context) error {
	policy, err := readFile(filepath.Join(filepath.Dir(filepath.Dir(d.p.examples)), "deploy", "vault-policy.hcl"))
	if err != nil {
		return err
	}
	roleID, secretID, err := d.vault.AppRole(ctx, "stands-reconciler", policy, map[string]any{"token_ttl": "1h", "token_max_ttl": "24h"})
	if err != nil {
		return err
	}
	// credential file → the variable naming it
	files := map[string][2]string{"passphrase": {"STANDS_PASSPHRASE_FILE", "demo-passphrase-" + localserver.RandomHex(8)},
		"git-token": {"STANDS_GIT_TOKEN_FILE", d.bot.Token}, "webhook-secret": {"STANDS_WEBHOOK_SECRET_FILE", d.hookKey},
		"vault-secret-id": {"VAULT_SECRET_ID_FILE", secretID}}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + d.p.join("stands-reconciler"), "STANDS_STATE_DIR=" + d.p.join("stands-reconciler", "state"),
		"STANDS_CLOUD_ENDPOINT=" + d.simURL, "HCLOUD_TOKEN_FILE=" + d.p.join("secrets", "hcloud-token"),
		"VAULT_ADDR=" + d.vault.Addr, "VAULT_ROLE_ID=" + roleID, "STANDS_NODES=" + map[bool]string{false: "skip", true: "full"}[d.p.full]}
	for name, f := range files {
		path, err := secretFile(d.p, name, f[1])
		if err != nil {
			return err
		}
		env = append(env, f[0]+"="+path)
	}
	d.rec, err = startServer(d.p, "stands-reconciler", env, "run", "--repo", d.gitea.URL+adminName+"/"+repoName+".git",
		"--git-user", botName, "--git-name", botName, "--git-email", botName+"@example.test", "--owner", owner, "--status-branch", statusBranch,
		"--listen", d.listen, "--poll-interval", "30s", "--drain-timeout", "30s", "--log-format", "json")
	if err != nil {
		return err
	}
	d.progress = progress{path: d.p.join("stands-reconciler", "stands-reconciler.log")}
	return waitHTTP(ctx, d.rec, "http://"+d.listen+"/healthz", "", 200, time.Minute)
}

// readTree is every file under dir by its slash-separated path, read as the reconciler reads a
// repository (no symbolic link followed).
func readTree(dir string) (map[string][]byte, error) {
	fsys, out := repofs.Dir(dir), map[string][]byte{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		out[p], err = fs.ReadFile(fsys, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	return out, nil
}
