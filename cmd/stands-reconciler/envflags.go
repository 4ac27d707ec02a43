package main

import (
	"flag"
	"fmt"
	"sync"
)

// Settings come from a flag, else from the environment, else from the flag's default, which is
// static: --help never prints a value read from the environment (a repository URL with a token, say).
// bindEnv ties a flag to its variable; parseFlags applies the variables of the flags the command line
// did not set, and a value that does not parse fails the start naming the variable.

type envBinding struct {
	variable string
	getenv   env
}

var bindings = struct {
	sync.Mutex
	m map[*flag.FlagSet]map[string]envBinding
}{m: map[*flag.FlagSet]map[string]envBinding{}}

// bindEnv makes variable the fallback of flag name in fs.
func bindEnv(fs *flag.FlagSet, name, variable string, getenv env) {
	bindings.Lock()
	defer bindings.Unlock()
	if bindings.m[fs] == nil {
		bindings.m[fs] = map[string]envBinding{}
	}
	bindings.m[fs][name] = envBinding{variable: variable, getenv: getenv}
}

// bound binds flag name of fs to variable and returns d, the flag's static default.
func bound[T any](fs *flag.FlagSet, getenv env, name, variable string, d T) T {
	bindEnv(fs, name, variable, getenv)
	return d
}

// applyEnv sets every bound flag the command line left alone from its variable, when set.
func applyEnv(fs *flag.FlagSet) error {
	bindings.Lock()
	bound := bindings.m[fs]
	delete(bindings.m, fs)
	bindings.Unlock()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, b := range bound {
		v := b.getenv(b.variable)
		if set[name] || v == "" {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("$%s (for --%s): %v", b.variable, name, err)
		}
	}
	return nil
}
