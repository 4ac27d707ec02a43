package prplan

import (
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"testing/fstest"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/manifest"
)

// Sandbox runs a job on untrusted input where it can be killed (internal/sandbox.Run with this
// binary): write gives the child its input, read takes its answer, and cpu, when not 0, lowers
// the child's CPU time limit to what is left of a plan's budget. It returns the CPU time the child
// used. Nil runs the job in this process, which has the output limit of every template but no CPU
// or memory limit, and charges no budget.
type Sandbox func(ctx context.Context, job string, cpu time.Duration, write func(io.Writer) error, read func(io.Reader) error) (time.Duration, error)

// RenderJob is the sandbox job that renders a pull request's stands: ServeRender.
const RenderJob = "render"

// renderRequest is a snapshot's files and the stands to render.
type renderRequest struct {
	Files map[string][]byte
	Links map[string]string // symbolic links, kept as links
	Large map[string]int64  // files over repofs.MaxFileSize, which nothing opens
	Paths []string
	Owner string
}

// renderEvent is the child's answer, two per stand: Begin before it renders one (so a child that
// dies is known to have died on that stand), then the result.
type renderEvent struct {
	Begin string
	File  string
	Diags []manifest.Diagnostic
	Print *standPrint
}

// ServeRender is the child's side of RenderJob: each stand preflighted and rendered under
// placeholders (the secret's existence is the parent's to check), its problems and its print.
func ServeRender(in io.Reader, out io.Writer) error {
	var req renderRequest
	if err := gob.NewDecoder(in).Decode(&req); err != nil {
		return fmt.Errorf("read render request: %w", err)
	}
	return renderStands(requestFS(req), req.Paths, req.Owner, gob.NewEncoder(out).Encode)
}

func renderStands(files fs.FS, paths []string, owner string, emit func(any) error) error {
	for _, p := range paths {
		if err := emit(renderEvent{Begin: p}); err != nil {
			return err
		}
		ev := renderEvent{File: p}
		res, err := manifest.Preflight(context.Background(), files, p, manifest.PreflightOptions{
			LoadOptions: manifest.LoadOptions{DefaultOwner: owner}, Secrets: manifest.PlaceholderSource{}})
		var rep *manifest.Report
		if err != nil && !errors.As(err, &rep) {
			return fmt.Errorf("render %s: %w", p, err)
		}
		if res.Err != nil {
			ev.Diags = capDiags(res.Err.Diags)
		}
		if res.Stand != nil && res.Err == nil {
			ev.Print = printOf(files, res.Stand)
		}
		if err := emit(ev); err != nil {
			return err
		}
	}
	return nil
}

// Bounds on a child's answer: a pull request can make many problems, each quoting what it rendered.
const (
	maxDiags      = 50
	maxDiagLength = 300
	maxAnswer     = 16 << 20 // bytes read from a child
)

func capDiags(diags []manifest.Diagnostic) []manifest.Diagnostic {
	out := slices.Clone(diags[:min(len(diags), maxDiags)])
	for i := range out {
		if len(out[i].Msg) > maxDiagLength {
			out[i].Msg = out[i].Msg[:maxDiagLength] + "…"
		}
	}
	if len(diags) > maxDiags {
		out = append(out, manifest.Diagnostic{Pos: out[len(out)-1].Pos, Rule: diags[maxDiags].Rule,
			Msg: fmt.Sprintf("and %d more problems", len(diags)-maxDiags)})
	}
	return out
}

func requestFS(req renderRequest) fs.FS {
	m := fstest.MapFS{}
	for p, data := range req.Files {
		m[p] = &fstest.MapFile{Data: data, Mode: 0o644}
	}
	return repofs.Tree(m, req.Links, req.Large)
}

// snapshotRequest reads a snapshot's files for the child, links and oversized files as such.
func snapshotRequest(files fs.FS, paths []string, owner string) (renderRequest, error) {
	req := renderRequest{Files: map[string][]byte{}, Links: map[string]string{}, Large: map[string]int64{}, Paths: paths, Owner: owner}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, repofs.ErrSymlink):
			req.Links[p] = ""
			return nil
		case err != nil:
			return err
		case d.IsDir():
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			req.Links[p] = ""
			return nil
		}
		data, err := fs.ReadFile(files, p)
		switch {
		case errors.Is(err, repofs.ErrSymlink):
			req.Links[p] = ""
		case errors.Is(err, repofs.ErrTooLarge):
			req.Large[p] = repofs.MaxFileSize + 1
		case err != nil:
			return err
		default:
			req.Files[p] = data
		}
		return nil
	})
	return req, err
}

// renderSandboxed renders stands of an untrusted snapshot in the sandbox. A stand whose render a
// limit stopped gets that as its problem, and the others are rendered in a new child.
func (pl *Planner) renderSandboxed(ctx context.Context, files fs.FS, paths []string) (map[string]renderEvent, error) {
	req, err := snapshotRequest(files, paths, pl.cfg.Guards.Owner)
	if err != nil {
		return nil, fmt.Errorf("read the snapshot for rendering: %w", err)
	}
	done := map[string]renderEvent{}
	for len(req.Paths) > 0 {
		current := ""
		read := func(in io.Reader) error {
			dec := gob.NewDecoder(io.LimitReader(in, maxAnswer))
			for {
				var ev renderEvent
				if err := dec.Decode(&ev); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return fmt.Errorf("read render answer: %w", err)
				}
				if ev.Begin != "" {
					current = ev.Begin
					continue
				}
				done[ev.File], current = ev, ""
			}
		}
		write := func(out io.Writer) error { return gob.NewEncoder(out).Encode(req) }
		if pl.cfg.Sandbox == nil {
			err = renderStands(files, req.Paths, req.Owner, func(v any) error {
				if ev := v.(renderEvent); ev.Begin == "" {
					done[ev.File] = ev
				}
				return nil
			})
		} else {
			var cpu, used time.Duration
			b := cpuBudgetOf(ctx)
			if b != nil {
				if cpu = b.remaining(); cpu <= 0 {
					return nil, b.err()
				}
			}
			used, err = pl.cfg.Sandbox(ctx, RenderJob, cpu, write, read)
			if b != nil {
				if over := b.charge(used); over != nil {
					return nil, over // the plan ends: its head is not rendered further
				}
			}
		}
		switch {
		case err == nil:
		case current == "" || ctx.Err() != nil:
			return nil, fmt.Errorf("render sandbox: %w", err)
		default:
			pl.log.Warn("a stand's render was stopped", "file", current, "err", err)
			done[current] = renderEvent{File: current, Diags: []manifest.Diagnostic{{Pos: manifest.Pos{File: current, Line: 1, Col: 1},
				Rule: manifest.RuleRender, Msg: fmt.Sprintf("rendering this stand was stopped: %v", err)}}}
		}
		var rest []string
		for _, p := range req.Paths {
			if _, ok := done[p]; !ok {
				rest = append(rest, p)
			}
		}
		if len(rest) == len(req.Paths) && err == nil {
			return nil, errors.New("render sandbox answered for no stand")
		}
		req.Paths = rest
	}
	return done, nil
}
