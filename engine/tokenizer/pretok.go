package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// The Split patterns that have hand-written scanners. Any other pattern runs on regexp2, whose
// default options reproduce the Rust tokenizers' Oniguruma semantics (\s is Unicode White_Space).
const (
	PatternQwen3  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	PatternQwen35 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternGPT2 is what a ByteLevel pre-tokenizer with use_regex=true splits with.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// A splitter cuts text into pre-tokens (Split with behavior Isolated: matches and the gaps
// between them, in order, never empty) and appends them to dst.
type splitter interface {
	split(s string, dst []string) []string
}

func newSplitter(pattern string) (splitter, error) {
	switch pattern {
	case PatternQwen3:
		return &scanner{body: cL}, nil
	case PatternQwen35:
		return &scanner{body: cL | cM}, nil
	}
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("split pattern %q: %w", pattern, err)
	}
	return regexSplitter{re}, nil
}

type regexSplitter struct{ re *regexp2.Regexp }

func (r regexSplitter) split(s string, dst []string) []string {
	m, err := r.re.FindAllStringIndex(s, -1)
	if err != nil { // only a match timeout, and none is set
		panic(err)
	}
	last := 0
	for _, ix := range m {
		if ix[0] > last {
			dst = append(dst, s[last:ix[0]])
		}
		if ix[1] > ix[0] {
			dst = append(dst, s[ix[0]:ix[1]])
		}
		last = ix[1]
	}
	if last < len(s) {
		dst = append(dst, s[last:])
	}
	return dst
}

// Character classes of the Qwen patterns, as bits.
const (
	cL  = 1 << iota // \p{L}
	cM              // \p{M}
	cN              // \p{N}
	cS              // \s (Unicode White_Space, like Oniguruma and regexp2)
	cNL             // \r or \n
)

// bmpClass caches the classes of the Basic Multilingual Plane (64 KiB), which is faster than
// the unicode range tables' binary searches for CJK and other scripts in the hot loop.
var bmpClass = func() *[0x10000]uint8 {
	var t [0x10000]uint8
	for r := range t {
		t[r] = classify(rune(r))
	}
	return &t
}()

func classify(r rune) uint8 {
	var k uint8
	switch {
	case unicode.IsLetter(r):
		k = cL
	case unicode.IsMark(r):
		k = cM
	case unicode.IsNumber(r):
		k = cN
	case unicode.IsSpace(r): // exactly White_Space
		k = cS
	}
	if r == '\r' || r == '\n' {
		k |= cNL
	}
	return k
}

// class returns the rune at s[i], its size and its class bits.
func class(s string, i int) (rune, int, uint8) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, bmpClass[c]
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return r, n, bmpClass[r]
	}
	return r, n, classify(r)
}

// scanner implements the Qwen3 and Qwen3.5/3.6 patterns without a regexp engine. They differ
// only in whether combining marks join letters (body) and so leave the punctuation class.
type scanner struct{ body uint8 }

func (p *scanner) split(s string, dst []string) []string {
	for i := 0; i < len(s); {
		j := p.next(s, i)
		dst = append(dst, s[i:j])
		i = j
	}
	return dst
}

// runIn returns the end of the run of runes from i whose classes intersect set; runOut that
// of the run of runes whose classes do not.
func runIn(s string, i int, set uint8) int {
	for i < len(s) {
		_, n, k := class(s, i)
		if k&set == 0 {
			break
		}
		i += n
	}
	return i
}

func runOut(s string, i int, set uint8) int {
	for i < len(s) {
		_, n, k := class(s, i)
		if k&set != 0 {
			break
		}
		i += n
	}
	return i
}

// next returns the end of the match that starts at i, trying the alternatives in the
// pattern's order with the outcome backtracking would give.
func (p *scanner) next(s string, i int) int {
	c, n, k := class(s, i)
	notPunct := cS | cL | cN | p.body // punctuation is [^\s\p{L}\p{N}] or [^\s\p{L}\p{M}\p{N}]
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if c == '\'' {
		if e := contraction(s, i+1); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?body+: a body rune starts a run; so does any other rune outside
	// CR, LF, letters and digits that a body rune follows.
	if k&p.body != 0 {
		return runIn(s, i+n, p.body)
	}
	hasNext, n2, k2 := i+n < len(s), 0, uint8(0)
	if hasNext {
		_, n2, k2 = class(s, i+n)
	}
	if k&(cNL|cL|cN) == 0 && k2&p.body != 0 {
		return runIn(s, i+n+n2, p.body)
	}
	// \p{N}
	if k&cN != 0 {
		return i + n
	}
	// ' ?punct+[\r\n]*'
	if c == ' ' && hasNext && k2&notPunct == 0 {
		return runIn(s, runOut(s, i+1+n2, notPunct), cNL)
	}
	if k&notPunct == 0 {
		return runIn(s, runOut(s, i+n, notPunct), cNL)
	}
	// Only white space is left. \s*[\r\n]+ ends after the run's last CR/LF; \s+(?!\S) gives
	// the run up to its last rune unless the run ends the text; \s+ takes a lone rune.
	end, lastNL, lastStart := i, -1, i
	for end < len(s) {
		c, n, k := class(s, end)
		if k&cS == 0 {
			break
		}
		if c == '\r' || c == '\n' {
			lastNL = end + 1
		}
		lastStart = end
		end += n
	}
	switch {
	case lastNL > 0:
		return lastNL
	case end == len(s) || lastStart == i:
		return end
	default:
		return lastStart
	}
}

// contraction returns the end of 's 't 're 've 'm 'll 'd (any case) when s[i:] starts with
// the part after the apostrophe, else 0. Oniguruma's case folding also lets U+017F (long s)
// match s; regexp2's does not, and the Rust tokenizers use Oniguruma.
func contraction(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	if s[i] == 0xc5 && i+1 < len(s) && s[i+1] == 0xbf {
		return i + 2
	}
	switch s[i] | 0x20 { // ASCII lower case; no other byte maps onto these letters
	case 's', 't', 'm', 'd':
		return i + 1
	case 'r', 'v':
		if i+1 < len(s) && s[i+1]|0x20 == 'e' {
			return i + 2
		}
	case 'l':
		if i+1 < len(s) && s[i+1]|0x20 == 'l' {
			return i + 2
		}
	}
	return 0
}
