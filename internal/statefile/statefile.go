// Package statefile keeps a small JSON document in the daemon's state folder across restarts (the
// operator's controls, the pull request heads planned): written aside and renamed into place, so a
// reader or a crash never sees it half written, readable by its owner only.
package statefile

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
)

// Write writes v to path atomically (mode 0600); "" keeps nothing.
func Write(path string, v any) error {
	if path == "" {
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeFile(path, data)
}

// writeFile writes data aside and renames it into place.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	err := os.MkdirAll(filepath.Dir(tmp), 0o700)
	if err == nil {
		err = os.WriteFile(tmp, data, 0o600)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}

// Read decodes path into v; found is false when path is "" or does not exist.
func Read(path string, v any) (found bool, err error) {
	if path == "" {
		return false, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, json.Unmarshal(data, v)
}
