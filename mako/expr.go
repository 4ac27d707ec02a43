package mako

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// The Python expressions Mako templates use, translated into Go template pipelines:
//
//	name, a.b, a['k'], a[0]      .name, .a.b, (index .a "k"), (index .a 0)   (loop variables: $name)
//	'text', 42, 1.5, True, None  "text", 42, 1.5, true, nil
//	a == b, !=, <, <=, >, >=     eq a b, ne, lt, le, gt, ge
//	not a, a and b, a or b       not a, and a b, or a b
//	len(a), str(a), (a)          len a, print a, a
//
// Anything else (arithmetic, in, is, calls, conditional expressions, slices) is an error naming it.

type token struct {
	kind string // "ident", "string", "number", "op", "eof"
	text string // the token as written; for a string, its value
}

func tokenize(src string) ([]token, error) {
	var toks []token
	for i := 0; i < len(src); {
		ch := src[i]
		switch {
		case ch == ' ' || ch == '\t':
			i++
		case ch == '\'' || ch == '"':
			s, n, err := pyString(src[i:])
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{"string", s})
			i += n
		case ch == '_' || unicode.IsLetter(rune(ch)):
			j := i
			for j < len(src) && (src[j] == '_' || unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j]))) {
				j++
			}
			toks = append(toks, token{"ident", src[i:j]})
			i = j
		case unicode.IsDigit(rune(ch)):
			j := i
			for j < len(src) && (unicode.IsDigit(rune(src[j])) || src[j] == '.') {
				j++
			}
			toks = append(toks, token{"number", src[i:j]})
			i = j
		default:
			op := ""
			for _, o := range []string{"==", "!=", "<=", ">=", "<", ">", ".", "[", "]", "(", ")", ","} {
				if strings.HasPrefix(src[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, fmt.Errorf("%q is not translated", string(ch))
			}
			toks = append(toks, token{"op", op})
			i += len(op)
		}
	}
	return append(toks, token{kind: "eof"}), nil
}

// pyString reads a quoted Python string literal: its value and its length in src.
func pyString(src string) (string, int, error) {
	q := src[0]
	var b strings.Builder
	for i := 1; i < len(src); i++ {
		switch ch := src[i]; {
		case ch == '\\' && i+1 < len(src):
			i++
			switch src[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case '\\', '\'', '"':
				b.WriteByte(src[i])
			default:
				return "", 0, fmt.Errorf("the escape \\%c is not translated", src[i])
			}
		case ch == q:
			return b.String(), i + 1, nil
		default:
			b.WriteByte(ch)
		}
	}
	return "", 0, errors.New("an unclosed string")
}

type parser struct {
	toks  []token
	pos   int
	scope []string
	gone  []string // assigned in a block that has ended
	// inRange: inside a % for, where a Go template's dot is the element.
	inRange bool
}

// operand is a translated expression: simple ones (a field chain, a variable, a literal) need no
// parentheses as a function's argument.
type operand struct {
	code   string
	simple bool
}

func (o operand) arg() string {
	if o.simple {
		return o.code
	}
	return "(" + o.code + ")"
}

// expr translates one Python expression.
func (c *converter) expr(src string) (string, error) {
	toks, err := tokenize(src)
	if err != nil {
		return "", err
	}
	p := &parser{toks: toks, scope: c.scope, gone: c.gone, inRange: slices.ContainsFunc(c.blocks, func(b block) bool { return b.kind == "for" })}
	o, err := p.or()
	if err != nil {
		return "", err
	}
	if t := p.peek(); t.kind != "eof" {
		return "", fmt.Errorf("%q is not translated", t.text)
	}
	return o.code, nil
}

func (p *parser) peek() token { return p.toks[p.pos] }
func (p *parser) next() token { t := p.toks[p.pos]; p.pos++; return t }

func (p *parser) accept(kind, text string) bool {
	if t := p.peek(); t.kind == kind && t.text == text {
		p.pos++
		return true
	}
	return false
}

func (p *parser) or() (operand, error)  { return p.logical("or", p.and) }
func (p *parser) and() (operand, error) { return p.logical("and", p.not) }

func (p *parser) logical(word string, sub func() (operand, error)) (operand, error) {
	first, err := sub()
	if err != nil {
		return operand{}, err
	}
	args := []string{first.arg()}
	for p.accept("ident", word) {
		o, err := sub()
		if err != nil {
			return operand{}, err
		}
		args = append(args, o.arg())
	}
	if len(args) == 1 {
		return first, nil
	}
	return operand{code: word + " " + strings.Join(args, " ")}, nil
}

func (p *parser) not() (operand, error) {
	if p.accept("ident", "not") {
		o, err := p.not()
		if err != nil {
			return operand{}, err
		}
		return operand{code: "not " + o.arg()}, nil
	}
	return p.comparison()
}

var comparisons = map[string]string{"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}

func (p *parser) comparison() (operand, error) {
	left, err := p.primary()
	if err != nil {
		return operand{}, err
	}
	t := p.peek()
	fn, ok := comparisons[t.text]
	if t.kind != "op" || !ok {
		if t.kind == "ident" && (t.text == "in" || t.text == "is") {
			return operand{}, fmt.Errorf("%q is not translated", t.text)
		}
		return left, nil
	}
	p.pos++
	right, err := p.primary()
	if err != nil {
		return operand{}, err
	}
	if n := p.peek(); n.kind == "op" && comparisons[n.text] != "" {
		return operand{}, errors.New("chained comparisons are not translated")
	}
	return operand{code: fn + " " + left.arg() + " " + right.arg()}, nil
}

func (p *parser) primary() (operand, error) {
	t := p.next()
	switch t.kind {
	case "string":
		return operand{code: goString(t.text), simple: true}, nil
	case "number":
		if _, err := strconv.ParseFloat(t.text, 64); err != nil {
			return operand{}, fmt.Errorf("the number %q is not translated", t.text)
		}
		return operand{code: t.text, simple: true}, nil
	case "ident":
		switch t.text {
		case "True":
			return operand{code: "true", simple: true}, nil
		case "False":
			return operand{code: "false", simple: true}, nil
		case "None":
			return operand{code: "nil", simple: true}, nil
		case "len", "str":
			if p.accept("op", "(") {
				return p.call(t.text)
			}
		case "and", "or", "not", "in", "is", "if", "else", "lambda":
			return operand{}, fmt.Errorf("%q is not translated here", t.text)
		}
		return p.chain(t.text)
	case "op":
		if t.text == "(" {
			o, err := p.or()
			if err != nil {
				return operand{}, err
			}
			if !p.accept("op", ")") {
				return operand{}, errors.New("a ( without its )")
			}
			return o, nil
		}
	}
	if t.kind == "eof" {
		return operand{}, errors.New("an expression ends too early")
	}
	return operand{}, fmt.Errorf("%q is not translated", t.text)
}

// call translates len(x) and str(x).
func (p *parser) call(name string) (operand, error) {
	arg, err := p.or()
	if err != nil {
		return operand{}, err
	}
	if !p.accept("op", ")") {
		return operand{}, fmt.Errorf("%s() takes one argument here", name)
	}
	fn := map[string]string{"len": "len", "str": "print"}[name]
	return operand{code: fn + " " + arg.arg()}, nil
}

// chain translates a name and its attributes and subscripts.
func (p *parser) chain(name string) (operand, error) {
	code := "." + name
	if p.inRange {
		code = "$." + name // inside a range, . is the element; $ is the template's data
	}
	for _, v := range p.scope {
		if v == name {
			code = "$" + name
		}
	}
	if !strings.HasPrefix(code, "$"+name) && slices.Contains(p.gone, name) {
		return operand{}, fmt.Errorf("%s was assigned inside a %% if or %% for that has ended: Python keeps it, a Go template variable ends with its block", name)
	}
	var keys []string // pending index keys, written as one index call
	flush := func() {
		if len(keys) > 0 {
			code = "(index " + code + " " + strings.Join(keys, " ") + ")"
			keys = nil
		}
	}
	for {
		switch {
		case p.accept("op", "."):
			t := p.next()
			if t.kind != "ident" {
				return operand{}, errors.New("a . without a name after it")
			}
			if p.peek().kind == "op" && p.peek().text == "(" {
				return operand{}, fmt.Errorf("the method call .%s() is not translated", t.text)
			}
			flush()
			code += "." + t.text
		case p.accept("op", "["):
			k := p.next()
			switch {
			case k.kind == "string" && isIdent(k.text) && len(keys) == 0:
				code += "." + k.text
			case k.kind == "string":
				keys = append(keys, goString(k.text))
			case k.kind == "number" && !strings.Contains(k.text, "."):
				keys = append(keys, k.text)
			default:
				return operand{}, errors.New("a subscript that is not a string or an integer is not translated")
			}
			if !p.accept("op", "]") {
				return operand{}, errors.New("a [ without its ] (slices are not translated)")
			}
		case p.peek().kind == "op" && p.peek().text == "(":
			return operand{}, fmt.Errorf("the call %s(…) is not translated", name)
		default:
			flush()
			// .a.b, $x.y, (index .a "k") and (index .a "k").x all stand as an argument as they are.
			return operand{code: code, simple: true}, nil
		}
	}
}

// goString is a Go template string literal: raw (backquoted) where it can be, so that a template in
// a YAML double-quoted scalar stays one.
func goString(s string) string {
	if !strings.ContainsAny(s, "`\r") {
		return "`" + s + "`"
	}
	return strconv.Quote(s)
}

// isIdent reports whether s is a name a Go template field chain can hold.
func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r != '_' && !unicode.IsLetter(r) && (i == 0 || !unicode.IsDigit(r)) {
			return false
		}
	}
	return true
}
