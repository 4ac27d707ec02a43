package mako

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// makoContext is what the Stands Engine's templates saw (its guide, §4, and the app templates' names).
var makoContext = map[string]any{
	"user_admin": "admin", "user_app": "app", "ssh_public_key": "ssh-ed25519 AAAAC3Nza stand", "network_ip_range": "10.0.0.0/16",
	"app": "kv", "instance": "cache",
	"preferences": map[string]any{"port": 6379, "password": "p<w>&'d \"q\"", "greeting": "  hello  ", "tags": []any{"a", "b"},
		"max-memory": "64mb", "labels": map[string]any{"team": "qa", "tier": "db"}, "empty": ""},
	"instances": map[string]any{"kv": map[string]any{"cache": map[string]any{"private_ip": "10.0.1.2", "preferences": map[string]any{"port": 6379}}},
		"my-app": map[string]any{"main": map[string]any{"private_ip": "10.0.1.3"}}},
	"node": map[string]any{"name": "db", "private_ip": "10.0.1.2"},
}

// Each template renders the same under Mako (python3-mako, the Stands Engine's renderer) and, once
// converted, under the manifest package's Go templates.
func TestConvertRendersAsMako(t *testing.T) {
	for _, c := range []struct{ name, src string }{
		{"names", "#cloud-config\nusers:\n  - name: ${user_admin}\n    ssh_authorized_keys:\n      - ${ssh_public_key}\n  - name: ${user_app}\n"},
		{"attributes and subscripts", "port ${preferences.port} ${preferences['port']} ${instances['kv']['cache'].private_ip} ${instances.kv.cache.preferences['port']}\n"},
		{"names with dashes", "${preferences['max-memory']} ${instances['my-app']['main']['private_ip']}\n"},
		{"filters", "${preferences.password | h} ${preferences.password | u} [${preferences.greeting | trim}] ${preferences.port | str} ${user_app | n}\n"},
		{"filters chained", "[${preferences.greeting | trim, h}]\n"},
		{"if elif else", "a\n% if preferences.port == 6379:\nsix\n% elif preferences.port > 7000:\nseven\n% else:\nother\n% endif\nb\n"},
		{"if false keeps blank lines", "a\n\n% if preferences.empty:\nnever\n% endif\n\nb\n"},
		{"conditions", "% if not preferences.empty and (user_app != 'root' or len(preferences.tags) >= 3):\nyes\n% endif\n"},
		{"nested indented controls", "items:\n% for t in preferences.tags:\n  % if t == 'a':\n  - first ${t}\n  % else:\n  - ${t}\n  % endif\n% endfor\n"},
		{"items", "% for k, v in preferences.labels.items():\n${k}=${v}\n% endfor\n"},
		{"enumerate", "% for i, t in enumerate(preferences.tags):\n${i}:${t}\n% endfor\n"},
		{"comments and escapes", "## a comment, gone with its line\n%% literal percent\nkeep {{ braces }} and {{.x}}\ncontinued \\\nline\n   ## indented comment\nend\n"},
		{"literals", "${'it\\'s'} ${\"dq\"} ${42}\n"},
		{"no trailing newline", "${user_admin}"},
		{"doc blocks", "a\n<%doc>\n  what this template is for\n</%doc>\nb <%doc>inline</%doc>c\n"},
		{"an assignment block", "<% port = preferences.port %>\nport ${port}\n<%\n  user = user_app  # the app's\n  tags = preferences.tags\n%>\n${user}: ${tags[0]}\n"},
		{"an assignment in a loop, then again", "% for t in preferences.tags:\n<% last = t %>\n${last}\n<% last = user_app %>${last}\n% endfor\n"},
		{"controls with comments", "% if preferences.port == 6379:  # the default\nyes\n% endif\n% for t in preferences.tags: # each\n${t}\n% endfor  # done\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			goSrc, problems := Convert(c.src)
			if len(problems) > 0 {
				t.Fatalf("problems: %v\n%s", problems, goSrc)
			}
			want := renderMako(t, c.src)
			tmpl, err := manifest.NewTemplate(c.name).Parse(goSrc)
			if err != nil {
				t.Fatalf("the converted template does not parse: %v\n%s", err, goSrc)
			}
			var got bytes.Buffer
			if err := tmpl.Execute(&got, makoContext); err != nil {
				t.Fatalf("render: %v\n%s", err, goSrc)
			}
			if got.String() != want {
				t.Errorf("Go renders\n%q\nMako renders\n%q\nfrom\n%s", got.String(), want, goSrc)
			}
		})
	}
}

// What is not translated is reported by line and left so that the template does not validate.
func TestConvertReports(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"arithmetic", "a\n${preferences.port + 1}\n", "line 2: the expression is not translated"},
		{"a method", "${user_app.upper()}\n", "the method call .upper() is not translated"},
		{"a call", "${foo(1)}\n", "the call foo(…) is not translated"},
		{"in", "% if 'a' in preferences.tags:\nx\n% endif\n", `"in" is not translated`},
		{"a filter", "${user_app | x}\n", "the filter |x is not translated"},
		{"a tag", "<%include file=\"x.mako\"/>\n", "a Mako tag (<%…>) is not translated"},
		{"a python statement", "<%\nx = 1\nimport os\n%>\n", "line 3: a Python statement in <% %> (only NAME = expression is translated) is not translated: import os"},
		{"a module block", "<%! import os %>\n", "a Mako tag"},
		{"a python call assigned", "<% x = user_app.upper() %>\n", "the expression assigned in <% %> is not translated"},
		{"a variable past its block", "% if user_app:\n<% x = 1 %>\n% endif\n${x}\n", "x was assigned inside a % if or % for that has ended"},
		{"a block never closed", "a\n<%doc>\nnever closed\n", "line 2: a Mako block (<%doc> or <%) is never closed"},
		{"an untranslated if, then its endif", "% if 'a' in preferences.tags:\nx\n% endif\n", `"in" is not translated`},
		{"a shell redirection Mako eats", "reply=$(cat <&3)\n", "a <& (Mako's call syntax: Mako drops the <"},
		{"a statement", "% while True:\n% endwhile\n", "the statement % while is not translated"},
		{"unclosed if", "% if user_app:\nx\n", "line 1: % if is never closed (% endif)"},
		{"stray endfor", "% endfor\n", "% endfor without its % for"},
		{"unclosed ${", "${user_app\n", "an unclosed ${ is not translated"},
		{"a slice", "${preferences.tags[0:1]}\n", `":" is not translated`},
		{"a ternary", "${'a' if user_app else 'b'}\n", `"if" is not translated`},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, problems := Convert(c.src)
			var msgs []string
			for _, p := range problems {
				msgs = append(msgs, p.String())
			}
			if !strings.Contains(strings.Join(msgs, "\n"), c.want) {
				t.Errorf("problems %q, want %q", msgs, c.want)
			}
			for _, m := range msgs {
				if strings.Contains(m, "without its %") && !strings.Contains(c.name, "stray") {
					t.Errorf("a closing line reported because its opening was: %q", m) // the opening said it already
				}
			}
			if len(problems) > 0 && !strings.Contains(c.name, "unclosed if") && !strings.Contains(c.name, "stray") {
				if _, err := manifest.NewTemplate(c.name).Parse(out); err == nil {
					t.Errorf("the output validates although a construct was left untranslated:\n%s", out)
				}
			}
		})
	}
}

// renderMako renders with python3-mako (scripts/install-deps.sh installs it).
func renderMako(t *testing.T, src string) string {
	t.Helper()
	py, err := FindPython()
	if err != nil {
		testenv.Missing(t, "%v", err)
	}
	out, err := Render(context.Background(), py, src, makoContext, nil)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
