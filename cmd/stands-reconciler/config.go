package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/stands-engine/stands-reconciler/daemon"
	"github.com/stands-engine/stands-reconciler/internal/logging"
)

func runConfig(ctx context.Context, args []string, std stdio, getenv env) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(std.err, "config: the one subcommand is `config check [flags of run]`")
		return exitUsage
	}
	fs := newFlags("config check", "config check [flags of run]\n\nPrints the daemon's effective configuration — every setting, its value and where it came from (flag,\nvariable, --config file or default), every secret as *** with the file it is read from — and exits 1\nnaming each setting that is missing or wrong, as `run` would refuse to start.", std)
	conf := newSettings(fs, getenv)
	conf.filesOnly = true
	var f daemonFlags
	f.register(conf)
	done, code := parseFlags(conf, args[1:], std)
	if done && code != exitError {
		return code
	}
	var problems []error
	if done { // the layer itself refused a value; show what it could read anyway
		problems = append(problems, errors.New("see the error above"))
	} else {
		f.s.FilesOnly = conf.filesOnly
		problems = f.s.Check(daemon.Env(conf.env()), conf)
	}
	printConfig(std, conf)
	for _, p := range problems {
		fmt.Fprintf(std.err, "config: %v\n", p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(std.err, "config: %d problem(s); `run` would not start\n", len(problems))
		return exitError
	}
	fmt.Fprintln(std.err, "config: ok")
	return exitOK
}

// printConfig writes every setting with its value and origin, then every secret as *** with where
// it is read from.
func printConfig(std stdio, c *settings) {
	w := tabwriter.NewWriter(std.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SETTING\tVALUE\tFROM")
	c.fs.VisitAll(func(fl *flag.Flag) {
		origin := c.origin[fl.Name]
		if origin == "" { // a flag of this run only (--allow-mass-destroy)
			origin = "default"
			c.fs.Visit(func(set *flag.Flag) {
				if set.Name == fl.Name {
					origin = "--" + fl.Name
				}
			})
		}
		if fl.Name == "config" {
			origin = "--config"
			if c.config == "" {
				origin = "$" + configVariable
				if c.getenv(configVariable) == "" {
					origin = "none"
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", fl.Name, quoted(pathOf(c)), origin)
			return
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", fl.Name, quoted(logging.RedactPassword(fl.Value.String())), origin)
	})
	for _, s := range daemon.Credentials {
		origin, value := c.Credential(s), "***"
		if origin == "" {
			origin, value = "not set", "-"
		}
		fmt.Fprintf(w, "credential %s\t%s\t%s\n", s.Name, value, origin)
	}
	_ = w.Flush()
}

func pathOf(c *settings) string {
	if c.file != nil {
		return c.file.path
	}
	return ""
}

func quoted(v string) string {
	if v == "" {
		return `""`
	}
	return v
}
