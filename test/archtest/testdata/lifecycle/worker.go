// Package lifecycle is TestTheLifecycleCheckSeesAStranger's input: a type that stops in words of its own.
package lifecycle

import "context"

type Worker struct{}

func (w *Worker) Run(ctx context.Context) {}

func (w *Worker) Wait() {}

// Stop is a word the vocabulary does not have.
func (w *Worker) Stop() {}

// Shutdown without a context: the vocabulary's Shutdown takes one.
func (w *Worker) Shutdown() error { return nil }

// Close taking a timeout: the vocabulary's Close takes nothing.
func (w *Worker) Close(timeout int) error { return nil }
