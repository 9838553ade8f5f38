package jinja

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind int

const (
	tkData tokKind = iota
	tkVarBegin
	tkVarEnd
	tkBlockBegin
	tkBlockEnd
	tkName
	tkString
	tkInt
	tkFloat
	tkOp
	tkEOF
)

type token struct {
	kind tokKind
	s    string
	off  int // byte offset in the normalized source, for error lines
}

// lexer follows jinja2.lexer with trim_blocks and lstrip_blocks on.
type lexer struct {
	src       string
	pos       int
	toks      []token
	lineStart bool // the last match ended with a newline (lstrip_blocks at a line start)
}

// SyntaxError is a template that does not parse.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

func (l *lexer) fail(off int, format string, args ...any) error {
	return &SyntaxError{Line: strings.Count(l.src[:min(off, len(l.src))], "\n") + 1, Msg: fmt.Sprintf(format, args...)}
}

var (
	rawBegin = regexp.MustCompile(`^\s*raw\s*(?:-%\}\s*|%\})`)
	rawEnd   = regexp.MustCompile(`\{%([-+]?)\s*endraw\s*(?:\+%\}|-%\}\s*|%\}\n?)`)
)

func lex(src string) (*lexer, error) {
	// Jinja2 normalizes newlines and drops one trailing newline (keep_trailing_newline=False).
	src = strings.ReplaceAll(strings.ReplaceAll(src, "\r\n", "\n"), "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	l := &lexer{src: src, lineStart: true}
	for l.pos < len(src) {
		i := l.nextTag()
		if i < 0 {
			l.emit(tkData, src[l.pos:], l.pos)
			break
		}
		text, kind, j := src[l.pos:i], src[i+1], i+2
		sign := byte(0)
		if j < len(src) && (src[j] == '-' || src[j] == '+') {
			sign = src[j]
			j++
		}
		if sign == '-' {
			text = strings.TrimRightFunc(text, isSpace)
		} else if sign != '+' && kind != '{' {
			lp := strings.LastIndexByte(text, '\n') + 1
			if rest := text[lp:]; (lp > 0 || l.lineStart) && rest != "" && strings.TrimLeftFunc(rest, isSpace) == "" {
				text = text[:lp]
			}
		}
		if text != "" {
			l.emit(tkData, text, l.pos)
		}
		l.pos = j
		l.lineStart = false
		var err error
		switch kind {
		case '#':
			err = l.comment(i)
		case '%':
			if m := rawBegin.FindString(src[j:]); m != "" {
				err = l.raw(j + len(m))
			} else {
				l.emit(tkBlockBegin, "", i)
				err = l.tag(i, "%}")
			}
		default:
			l.emit(tkVarBegin, "", i)
			err = l.tag(i, "}}")
		}
		if err != nil {
			return nil, err
		}
	}
	l.emit(tkEOF, "", len(src))
	return l, nil
}

func (l *lexer) emit(k tokKind, s string, off int) { l.toks = append(l.toks, token{k, s, off}) }

// nextTag finds the next "{{", "{%" or "{#" at or after pos.
func (l *lexer) nextTag() int {
	for i := l.pos; ; {
		k := strings.IndexByte(l.src[i:], '{')
		if k < 0 || i+k+1 >= len(l.src) {
			return -1
		}
		i += k
		if c := l.src[i+1]; c == '{' || c == '%' || c == '#' {
			return i
		}
		i++
	}
}

// endTag consumes a tag end at pos after whitespace control: "-" strips all following
// whitespace, trim_blocks removes one newline after a block or comment.
func (l *lexer) endTag(n int, trim bool) {
	switch {
	case l.src[l.pos] == '-':
		l.pos += n + 1
		ws := len(l.src[l.pos:]) - len(strings.TrimLeftFunc(l.src[l.pos:], isSpace))
		l.pos += ws
		l.lineStart = ws > 0 && l.src[l.pos-1] == '\n'
	case l.src[l.pos] == '+':
		l.pos += n + 1
	default:
		l.pos += n
		if trim && l.pos < len(l.src) && l.src[l.pos] == '\n' {
			l.pos++
			l.lineStart = true
		}
	}
}

func (l *lexer) comment(start int) error {
	k := strings.Index(l.src[l.pos:], "#}")
	if k < 0 {
		return l.fail(start, "missing end of comment tag")
	}
	l.pos += k
	if k > 0 && (l.src[l.pos-1] == '-' || l.src[l.pos-1] == '+') {
		l.pos--
	}
	l.endTag(2, true)
	return nil
}

func (l *lexer) raw(from int) error {
	loc := rawEnd.FindStringSubmatchIndex(l.src[from:])
	if loc == nil {
		return l.fail(from, "missing end of raw directive")
	}
	data := l.src[from : from+loc[0]]
	if l.src[from+loc[2]:from+loc[3]] == "-" {
		data = strings.TrimRightFunc(data, isSpace)
	}
	if data != "" {
		l.emit(tkData, data, from)
	}
	l.pos = from + loc[1]
	l.lineStart = strings.HasSuffix(l.src[from+loc[0]:l.pos], "\n")
	return nil
}

// tagEnd consumes and emits the end of the tag if rest starts with it.
func (l *lexer) tagEnd(rest, end string) bool {
	switch {
	case strings.HasPrefix(rest, "-"+end):
		l.endTag(2, false)
	case end == "%}" && strings.HasPrefix(rest, "+%}"):
		l.endTag(2, true)
	case strings.HasPrefix(rest, end):
		l.endTag(2, end == "%}")
	default:
		return false
	}
	if end == "}}" {
		l.emit(tkVarEnd, "", l.pos)
	} else {
		l.emit(tkBlockEnd, "", l.pos)
	}
	return true
}

var ops = []string{"**", "//", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// tag tokenizes the inside of {{ }} or {% %} up to its end, which only counts outside brackets.
func (l *lexer) tag(start int, end string) error {
	depth := 0
	for {
		l.pos += len(l.src[l.pos:]) - len(strings.TrimLeftFunc(l.src[l.pos:], isSpace))
		if l.pos >= len(l.src) {
			return l.fail(start, "unexpected end of template, expected end of tag")
		}
		rest := l.src[l.pos:]
		if depth == 0 && l.tagEnd(rest, end) {
			return nil
		}
		c, size := utf8.DecodeRuneInString(rest)
		off := l.pos
		switch {
		case c >= '0' && c <= '9':
			l.number()
		case c == '_' || unicode.IsLetter(c):
			n := size
			for n < len(rest) {
				r, s := utf8.DecodeRuneInString(rest[n:])
				if r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
					break
				}
				n += s
			}
			l.emit(tkName, rest[:n], off)
			l.pos += n
		case c == '\'' || c == '"':
			if err := l.str(c); err != nil {
				return err
			}
		default:
			op := ""
			for _, o := range ops {
				if strings.HasPrefix(rest, o) {
					op = o
					break
				}
			}
			if op == "" {
				return l.fail(off, "unexpected char %q", c)
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				if depth == 0 {
					return l.fail(off, "unexpected '%s'", op)
				}
				depth--
			}
			l.emit(tkOp, op, off)
			l.pos += len(op)
		}
	}
}

// number lexes an int or float literal; underscores separate digits as in Python.
func (l *lexer) number() {
	s, i := l.src, l.pos
	digits := func() {
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '_' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9') {
			i++
		}
	}
	digits()
	kind := tkInt
	if l.pos == 0 || s[l.pos-1] != '.' { // jinja2: (?<!\.) — "a.0.1" is item access, not a float
		if i+1 < len(s) && s[i] == '.' && s[i+1] >= '0' && s[i+1] <= '9' {
			i++
			digits()
			kind = tkFloat
		}
		if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
			j := i + 1
			if j < len(s) && (s[j] == '+' || s[j] == '-') {
				j++
			}
			if j < len(s) && s[j] >= '0' && s[j] <= '9' {
				i = j
				digits()
				kind = tkFloat
			}
		}
	}
	l.emit(kind, strings.ReplaceAll(s[l.pos:i], "_", ""), l.pos)
	l.pos = i
}

// str lexes a quoted literal and decodes its escapes like Python's "unicode-escape" codec.
func (l *lexer) str(q rune) error {
	start := l.pos
	var b strings.Builder
	i := l.pos + 1
	for {
		if i >= len(l.src) {
			return l.fail(start, "unterminated string")
		}
		c := l.src[i]
		if rune(c) == q {
			break
		}
		if c != '\\' || i+1 >= len(l.src) {
			b.WriteByte(c)
			i++
			continue
		}
		e := l.src[i+1]
		i += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case '\n':
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n > len(l.src) {
				return l.fail(start, "truncated \\%c escape", e)
			}
			r, err := strconv.ParseUint(l.src[i:i+n], 16, 32)
			if err != nil {
				return l.fail(start, "truncated \\%c escape", e)
			}
			b.WriteRune(rune(r))
			i += n
		default:
			if e >= '0' && e <= '7' {
				j := i - 1
				for i < len(l.src) && i < j+3 && l.src[i] >= '0' && l.src[i] <= '7' {
					i++
				}
				r, _ := strconv.ParseUint(l.src[j:i], 8, 32)
				b.WriteRune(rune(r))
			} else {
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		}
	}
	l.emit(tkString, b.String(), start)
	l.pos = i + 1
	return nil
}
