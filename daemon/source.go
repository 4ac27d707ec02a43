package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/internal/credential"
)

// repoKind is how the repository is reached.
type repoKind int

const (
	localRepo repoKind = iota // a path: read in place, watched for changes
	httpRepo                  // http(s)://: a token, and Gitea's API at the same address
	sshRepo                   // ssh:// or user@host:path: a key, and pinned host keys
)

func repoKindOf(repo string) repoKind {
	switch {
	case strings.HasPrefix(repo, "http://"), strings.HasPrefix(repo, "https://"):
		return httpRepo
	case strings.HasPrefix(repo, "ssh://"), strings.Contains(repo, "@") && !strings.Contains(repo, "://"):
		return sshRepo
	}
	return localRepo
}

// checkRepoURL refuses a password in the repository's URL: a command line is every user's to read.
func checkRepoURL(repo string) error {
	if u, err := url.Parse(repo); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			return errors.New("holds a password: give the token in $STANDS_GIT_TOKEN_FILE (or credentials.git-token) and the user in --git-user")
		}
	}
	return nil
}

// source is the repository client: a token (watched when it comes from a file) for HTTP(S), a key
// for SSH, nothing for a local path.
func (s *Settings) source(env Env, gitToken *credential.Credential, log *slog.Logger) (*gitsource.Source, error) {
	opts := []gitsource.Option{gitsource.WithIdentity(gitsource.Identity{Name: s.GitName, Email: s.GitEmail}), gitsource.WithLogger(log)}
	if dir, err := s.stateFile("git"); err == nil {
		opts = append(opts, gitsource.WithWorkDir(dir)) // the repository's objects, on disk
	}
	sign, err := s.signingOption(env, log)
	if err != nil {
		return nil, err
	}
	opts = append(opts, sign)
	status := s.StatusBranch
	switch repoKindOf(s.Repo) {
	case httpRepo:
		if gitToken.Set() {
			opts = append(opts, gitsource.WithToken(s.GitUser, gitToken.Value))
		}
	case sshRepo:
		auth, err := sshAuth(env, s.GitKnownHosts)
		if err != nil {
			return nil, err
		}
		opts = append(opts, gitsource.WithAuth(auth))
	default: // a local repository: do not move the branch checked out in its work tree
		if status == "" {
			status = "stands-status"
		}
	}
	if status != "" {
		opts = append(opts, gitsource.WithStatusBranch(status))
	}
	return gitsource.New(s.Repo, s.Branch, opts...), nil
}

// giteaAPI is where the repository's Gitea API is: --gitea-url, else an http(s) repository's own
// URL; "" for an SSH or local repository without --gitea-url.
func (s *Settings) giteaAPI() string {
	if s.GiteaURL == "" && repoKindOf(s.Repo) == httpRepo {
		return s.Repo
	}
	return s.GiteaURL
}

// forge is the Gitea API of an http(s) repository: commit statuses and pull request plans. An SSH
// or local repository has none (--gitea-url gives an SSH repository its API). nil: none.
func (s *Settings) forge(gitToken *credential.Credential, log *slog.Logger) Forge {
	apiURL := s.giteaAPI()
	if apiURL == "" {
		log.Info("no Gitea API: no commit statuses and no pull request plans")
		return nil
	}
	if !gitToken.Set() {
		log.Warn("no STANDS_GIT_TOKEN for the Gitea API: no commit statuses and no pull request plans")
		return nil
	}
	g, err := gitsource.NewGitea(apiURL, gitToken.Value)
	if err != nil {
		log.Warn("no Gitea API", "err", err)
		return nil
	}
	return g
}

// sshAuth reads the key from $STANDS_GIT_SSH_KEY_FILE (or credentials.git-ssh-key) and pins host
// keys from known (an OpenSSH known_hosts file); there is no way to skip the host check.
func sshAuth(env Env, known string) (transport.AuthMethod, error) {
	keyFile := env("STANDS_GIT_SSH_KEY_FILE")
	if keyFile == "" || known == "" {
		return nil, errors.New("an ssh:// repository needs $STANDS_GIT_SSH_KEY_FILE (or credentials.git-ssh-key) and --git-known-hosts")
	}
	auth, err := gitssh.NewPublicKeysFromFile("git", keyFile, "")
	if err != nil {
		return nil, fmt.Errorf("read STANDS_GIT_SSH_KEY_FILE: %w", err)
	}
	cb, err := gitssh.NewKnownHostsCallback(known)
	if err != nil {
		return nil, fmt.Errorf("read --git-known-hosts: %w", err)
	}
	auth.HostKeyCallback = cb
	return auth, nil
}
