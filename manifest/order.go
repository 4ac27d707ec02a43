package manifest

import (
	"errors"
	"iter"
	"maps"
	"reflect"
	"slices"
	"text/template"
)

// The order of a template's mappings. Go's maps have none, and a template ranging over one sees its
// keys sorted; the Stands Engine's Python dicts kept the order of the YAML they came from, and a Mako
// template iterating one wrote it in that order. So a render remembers the order of each mapping it
// builds from the manifest (preferences, nodes, apps and instances), and a template converted from
// Mako iterates through iter, items and enumerate, which follow it (package mako). Mappings the
// render did not build from YAML iterate sorted.

// keyOrder remembers the order of the mappings one render built. Each entry holds its map, so no
// other map can take its address while the render runs.
type keyOrder map[uintptr]orderedMap

type orderedMap struct {
	m    map[string]any
	keys []string
}

// remember records m's keys in the order given.
func (o keyOrder) remember(m map[string]any, keys []string) {
	if o != nil {
		o[reflect.ValueOf(m).Pointer()] = orderedMap{m: m, keys: keys}
	}
}

// keys is m's keys in the order its YAML had them, else sorted.
func (o keyOrder) keys(m map[string]any) []string {
	if e, ok := o[reflect.ValueOf(m).Pointer()]; ok && len(e.keys) == len(m) {
		return e.keys
	}
	return slices.Sorted(maps.Keys(m))
}

var errNotIterable = errors.New("iterates over a mapping or a list only")

// funcs are the iteration helpers of templates converted from Mako, in this order.
func (o keyOrder) funcs() template.FuncMap {
	each := func(v any) (iter.Seq2[int, any], error) {
		switch x := v.(type) {
		case map[string]any:
			keys := o.keys(x)
			return func(yield func(int, any) bool) {
				for i, k := range keys {
					if !yield(i, k) {
						return
					}
				}
			}, nil
		case []any:
			return func(yield func(int, any) bool) {
				for i, e := range x {
					if !yield(i, e) {
						return
					}
				}
			}, nil
		}
		return nil, errNotIterable
	}
	return template.FuncMap{
		// iter is Python's `for x in v`: a mapping's keys, a list's items.
		"iter": func(v any) (iter.Seq[any], error) {
			s, err := each(v)
			if err != nil {
				return nil, err
			}
			return func(yield func(any) bool) {
				for _, x := range s {
					if !yield(x) {
						return
					}
				}
			}, nil
		},
		// enumerate is Python's enumerate(v).
		"enumerate": each,
		// items is Python's v.items(), for a mapping.
		"items": func(v any) (iter.Seq2[string, any], error) {
			m, ok := v.(map[string]any)
			if !ok {
				return nil, errors.New("items: not a mapping")
			}
			keys := o.keys(m)
			return func(yield func(string, any) bool) {
				for _, k := range keys {
					if !yield(k, m[k]) {
						return
					}
				}
			}, nil
		},
	}
}
