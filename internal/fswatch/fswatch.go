// Package fswatch calls a function when files in some folders change, debounced. Folders, not files,
// are watched: editors, credential managers and systemd replace files by renaming them.
package fswatch

import (
	"context"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Dirs watches dirs until ctx ends and calls onChange once per burst of events.
func Dirs(ctx context.Context, dirs []string, debounce time.Duration, onChange func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer w.Close()
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			return fmt.Errorf("watch %s: %w", d, err)
		}
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			timer.Reset(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			return fmt.Errorf("watch: %w", err)
		case <-timer.C:
			onChange()
		}
	}
}
