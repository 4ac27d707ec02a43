// Package fswatch calls a function when files in some folders change, debounced. Folders, not files,
// are watched: editors, credential managers and systemd replace files by renaming them.
package fswatch

import (
	"context"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Start watches dirs from the moment it returns until ctx ends, calling onChange once per burst of
// events. A watch that cannot be set up is returned; one that fails later goes to onError. done is
// closed when the watch has stopped and will call nothing more.
func Start(ctx context.Context, dirs []string, debounce time.Duration, onChange func(), onError func(error)) (done <-chan struct{}, err error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			w.Close()
			return nil, fmt.Errorf("watch %s: %w", d, err)
		}
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := loop(ctx, w, debounce, onChange); err != nil && onError != nil {
			onError(err)
		}
	}()
	return stopped, nil
}

// Dirs is Start that blocks until ctx ends or the watch fails.
func Dirs(ctx context.Context, dirs []string, debounce time.Duration, onChange func()) error {
	failed := make(chan error, 1)
	done, err := Start(ctx, dirs, debounce, onChange, func(err error) { failed <- err })
	if err != nil {
		return err
	}
	<-done
	select {
	case err := <-failed:
		return err
	default:
		return nil
	}
}

func loop(ctx context.Context, w *fsnotify.Watcher, debounce time.Duration, onChange func()) error {
	defer w.Close()
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
