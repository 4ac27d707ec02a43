package localserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// templateVersion names the shape of a template: change it when setUp or the app.ini changes what a
// migrated database holds.
const templateVersion = "1"

// templateCreds are the admin's credentials, kept beside the template's database.
type templateCreds struct {
	User     string `json:"user"`
	Password string `json:"password"`
	Token    string `json:"token"`
}

// fromTemplate gives g's work path the template's database (made first when there is none for this
// binary and admin) and g the admin's credentials.
func (g *Gitea) fromTemplate(ctx context.Context, c GiteaConfig) error {
	dir, err := g.template(ctx, c)
	if err != nil {
		return fmt.Errorf("gitea template: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "creds.json"))
	if err != nil {
		return fmt.Errorf("gitea template: %w", err)
	}
	var creds templateCreds
	if err := json.Unmarshal(data, &creds); err != nil || creds.User != g.User || !tokenRE.MatchString(creds.Token) {
		return fmt.Errorf("gitea template %s: unreadable credentials", dir)
	}
	g.Password, g.Token = creds.Password, creds.Token
	if err := os.MkdirAll(filepath.Join(c.Dir, "data"), 0o700); err != nil {
		return err
	}
	return copyFile(filepath.Join(dir, "gitea.db"), filepath.Join(c.Dir, "data", "gitea.db"))
}

// template is the folder holding the migrated database and the credentials for c's binary and admin,
// made when missing: in a folder of its own, renamed into place when done, so a concurrent start
// (another test process) either finds it whole or makes its own and drops it.
func (g *Gitea) template(ctx context.Context, c GiteaConfig) (string, error) {
	st, err := os.Stat(c.Bin)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(templateVersion + "\x00" + c.Bin + "\x00" + strconv.FormatInt(st.Size(), 10) + "\x00" +
		st.ModTime().UTC().String() + "\x00" + c.Admin))
	dir := filepath.Join(c.Template, hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "creds.json")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(c.Template, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(c.Template, "making-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	// The template is made by a server of its own, in tmp, on ports nothing listens on (it is never
	// served): only its database and credentials are kept.
	mc := c
	mc.Dir, mc.Template = filepath.Join(tmp, "work"), ""
	t := &Gitea{User: c.Admin, Password: "pw-" + RandomHex(8), Dir: mc.Dir, bin: c.Bin, conf: filepath.Join(mc.Dir, "custom", "conf", "app.ini"),
		URL: fmt.Sprintf("http://127.0.0.1:%d/", c.HTTPPort)}
	if err := os.MkdirAll(filepath.Dir(t.conf), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(t.conf, []byte(t.appIni(mc)), 0o600); err != nil {
		return "", err
	}
	t.env = append(os.Environ(), "GITEA_WORK_DIR="+mc.Dir, "HOME="+mc.Dir, "GITEA_CUSTOM="+filepath.Join(mc.Dir, "custom"))
	if err := t.setUp(ctx); err != nil {
		return "", err
	}
	made := filepath.Join(tmp, "template")
	if err := os.MkdirAll(made, 0o700); err != nil {
		return "", err
	}
	if err := copyFile(filepath.Join(mc.Dir, "data", "gitea.db"), filepath.Join(made, "gitea.db")); err != nil {
		return "", err
	}
	creds, _ := json.Marshal(templateCreds{User: t.User, Password: t.Password, Token: t.Token})
	if err := os.WriteFile(filepath.Join(made, "creds.json"), creds, 0o600); err != nil {
		return "", err
	}
	if err := os.Rename(made, dir); err != nil && !errors.Is(err, fs.ErrExist) {
		if _, statErr := os.Stat(filepath.Join(dir, "creds.json")); statErr != nil {
			return "", err
		}
		// Another start made it first: theirs is used, ours dropped with tmp.
	}
	return dir, nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
