// Package parse splits model output into content, reasoning and tool calls, incrementally.
//
// It reads the output format of Qwen3.5/3.6 (the "qwen3_coder" XML tool-call
// format inside an optional <think> block). Parse and Stream share one state
// machine: Parse feeds the whole text at once, so the concatenated deltas of a
// Stream equal Parse of the same text for every chunking.
//
// # Reasoning
//
// With Options.PromptEndsInThink (the prompt ends "<think>\n") the output
// starts inside the reasoning; otherwise (thinking off, the prompt ends
// "<think>\n\n</think>\n\n") everything is content. Exactly this is stripped:
//
//   - a "<think>" at the very start of the output, and one "\n" right after it;
//   - the "</think>" that ends the reasoning, and at most two "\n" right after it
//     (the template writes "</think>\n\n").
//
// The "\n" the template puts before "</think>" stays in the reasoning (as in
// vLLM). Output that ends before "</think>" is all reasoning (truncated).
// "<tool_call>", whitespace, "<function=" also ends the reasoning: the tool call
// starts there (Qwen3.5/3.6 sometimes opens a call without "</think>"). Any
// other tag inside the reasoning is reasoning text.
//
// # Content and tool calls
//
// A call is
//
//	<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n...</function>\n</tool_call>
//
// Whitespace directly before a call (the template writes "\n\n" between the
// content and the first call), between calls and after the last one is
// dropped; whitespace between a call and later text is kept only if content
// precedes the call (it then separates the two). All other content text,
// including text after a call, is kept as is. A call's Arguments is a JSON
// object text with the parameters in output order ({"k": v, "k2": v2}); each
// value loses one leading and one trailing "\n" and is converted by the JSON
// schema type of its parameter (see convert.go). NAME and K must be non-empty,
// without whitespace or '<', and end with '>' within 256 bytes; otherwise the
// text is not a tag. Content never carries Qwen's markup tokens: a
// "<tool_call>" that is followed (after whitespace) by neither a valid
// "<function=NAME>" nor a JSON call is dropped, as are "</tool_call>",
// "<think>" and "</think>" there (the last with up to two "\n" after it).
//
// A parameter value ends at the first of:
//
//	</parameter>  then whitespace, then <parameter= | </function> | </tool_call> | <tool_call> | <function= | end of output
//	</function>   then whitespace, then </tool_call> | <tool_call> | <function= | end of output  (</parameter> missing)
//	</tool_call>  then whitespace, then <tool_call> | <function= | end of output                (both missing)
//	<parameter=   at the start of a line                                                       (</parameter> missing)
//
// so a "</parameter>" or "</function>" that is followed by anything else is
// part of the value (code that mentions the tags survives). The cost: a call
// that is missing its own closing tags and is followed by prose keeps the
// prose in its last value.
//
// # Malformed output (all tolerated, all tested)
//
//	case                                      handling
//	----                                      --------
//	bare <function=…>…</function>             a call, as with the wrapper, if a tag follows the header (after
//	                                          whitespace); else content, so prose may mention <function=x>
//	<tool_call>{"name":…,"arguments":{…}}     Hermes-style JSON call: "arguments" (or "parameters") may be an
//	  </tool_call>                            object, a string holding one, or absent ({}); emitted compacted.
//	                                          Invalid JSON or no "name": the text stays content
//	text after </tool_call>                   content (a call may follow it again)
//	end of output inside a call               best effort, what is complete is kept:
//	                                          - open <parameter= header: that parameter is dropped
//	                                          - open parameter value: the value runs to the end (minus a
//	                                            partial closing tag) and is kept
//	                                          - missing </function> / </tool_call>: the call is closed ("}")
//	                                          - <tool_call> then an open <function= header: dropped
//	</parameter> missing                      value ends before "\n<parameter=" or a closing </function>
//	</function> inside a value                not an end tag unless the closing sequence above follows
//	<tool_call><function= inside reasoning    ends the reasoning without </think>
//	markup tokens in content                  dropped (see Content and tool calls)
//	tool name not in the request's tools      still returned; its values are strings
//	</function> missing before next call      the call ends at the next <tool_call> / <function=
//	stray text between parameters            dropped
//	duplicate parameter names                 both kept in order (JSON decoders keep the last)
//
// # Streaming
//
// A Stream emits text as soon as it cannot be the start of a tag, so only a
// possible tag prefix, the whitespace run at the end of content (it may precede
// a call) and an incomplete UTF-8 sequence are held back. A call's first delta
// carries its ID and Name once "<function=NAME>" is complete; its Arguments
// fragments follow as each parameter completes (once the tag after its
// "</parameter>" has begun): `{"k": v`, `, "k2": v2`, and `}` at "</function>".
// A Hermes JSON call is held until its object is complete.
package parse

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// Options configures a parse.
type Options struct {
	PromptEndsInThink bool          // the prompt ends inside <think>: output starts as reasoning
	Tools             []Tool        // the request's tools, for typing parameter values
	NewID             func() string // returns a full call ID; nil: "call_" + 24 random hex digits
}

// ToolCall is one parsed call.
type ToolCall struct {
	Index               int
	ID, Name, Arguments string // Arguments: JSON object text
}

// Result is a whole parse.
type Result struct {
	Content, Reasoning string
	ToolCalls          []ToolCall
}

// Delta is one streamed piece; exactly one field is set.
type Delta struct {
	Content, Reasoning string
	ToolCall           *ToolCallDelta
}

// ToolCallDelta is a piece of a call: the first one carries ID and Name, later
// ones carry Arguments fragments that concatenate to ToolCall.Arguments.
type ToolCallDelta struct {
	Index     int
	ID, Name  string
	Arguments string
}

// Parse parses a complete output.
func Parse(text string, opt Options) Result {
	s := NewStream(opt)
	s.Feed(text)
	s.Finish()
	return s.Result()
}

// Tags (markup.go).
const (
	tThink    = ThinkOpen
	tThinkEnd = ThinkEnd
	tCall     = CallOpen
	tCallEnd  = CallEnd
	tFunc     = FuncOpen
	tFuncEnd  = FuncEnd
	tParam    = ParamOpen
	tParamEnd = ParamEnd

	ws      = " \t\r\n"
	maxName = 256 // longest function or parameter name; bounds what a header holds back
)

// valueEnds are the tags that may end a parameter value, each with what must
// follow it (after whitespace) for it to count; nil: nothing needs to follow.
var valueEnds = []struct {
	tag    string
	follow []string
}{
	{tParamEnd, []string{tParam, tFuncEnd, tCallEnd, tCall, tFunc}},
	{tFuncEnd, []string{tCallEnd, tCall, tFunc}},
	{tCallEnd, []string{tCall, tFunc}},
	{tParam, nil}, // only at the start of a line
}

type state uint8

const (
	stThinkStart state = iota // optional "<think>"
	stThinkNL                 // optional "\n" after it
	stReason
	stAfterThink // up to two "\n" after "</think>"
	stContent
	stCallBody // inside <function=…>, between parameters
	stValue    // inside a parameter value
	stCallEnd  // after </function> (the call is closed): optional </tool_call>
)

// Stream parses output that arrives in chunks. It is not safe for concurrent use.
type Stream struct {
	newID     func() string
	types     map[string]map[string][]string // tool → parameter → schema types
	st        state
	buf       string // text not yet decided
	final     bool
	nl        int             // "\n" stripped after </think>
	js        jsonScan        // scan of a Hermes JSON call held at the front of buf
	param     string          // name of the open parameter
	val       strings.Builder // its raw value so far
	content   strings.Builder
	reason    strings.Builder
	calls     []*call
	open      *call // the XML call being parsed
	afterCall bool  // a call just ended
	out       []Delta
	finished  bool
}

type call struct {
	ToolCall // Arguments unused: see args
	args     strings.Builder
	params   int
	types    map[string][]string
}

// NewStream starts a parse.
func NewStream(opt Options) *Stream {
	s := &Stream{newID: opt.NewID, types: paramTypes(opt.Tools), st: stContent}
	if s.newID == nil {
		s.newID = randomID
	}
	if opt.PromptEndsInThink {
		s.st = stThinkStart
	}
	return s
}

func randomID() string {
	var b [12]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return "call_" + hex.EncodeToString(b[:])
}

// Feed parses the next chunk and returns what became certain. Text fed after
// Finish is ignored.
func (s *Stream) Feed(text string) []Delta {
	if s.finished {
		return nil
	}
	s.buf += text
	for s.step() {
	}
	return s.flush()
}

// Finish ends the output: held-back text is flushed, open calls are closed.
func (s *Stream) Finish() []Delta {
	if s.finished {
		return nil
	}
	s.final = true
	for s.step() {
	}
	s.finished = true
	return s.flush()
}

// Result returns everything parsed so far (all of it after Finish). A call
// still open has the Arguments so far.
func (s *Stream) Result() Result {
	r := Result{Content: s.content.String(), Reasoning: s.reason.String()}
	for _, c := range s.calls {
		tc := c.ToolCall
		tc.Arguments = c.args.String()
		r.ToolCalls = append(r.ToolCalls, tc)
	}
	return r
}

func (s *Stream) flush() []Delta {
	out := s.out
	s.out = nil
	return out
}

// step makes one decision about the front of buf; false: it needs more text
// (or, when final, everything is done).
func (s *Stream) step() bool {
	b, final := s.buf, s.final
	switch s.st {
	case stThinkStart:
		switch match(b, tThink) {
		case mFull:
			s.eat(len(tThink))
			s.st = stThinkNL
			return true
		case mPart:
			if !final {
				return false
			}
		}
		s.st = stReason
		return true

	case stThinkNL:
		if b == "" && !final {
			return false
		}
		if b != "" && b[0] == '\n' {
			s.eat(1)
		}
		s.st = stReason
		return true

	case stAfterThink:
		if b == "" && !final {
			return false
		}
		if b != "" && b[0] == '\n' && s.nl < 2 {
			s.eat(1)
			if s.nl++; s.nl < 2 {
				return true
			}
		}
		s.st = stContent
		return true

	case stReason:
		i := findTag(b, tThinkEnd, tCall)
		if i > 0 {
			n := s.avail(b[:i], i == len(b))
			s.text(&s.reason, b[:n])
			return n > 0
		}
		switch {
		case b == "":
			return false
		case match(b, tThinkEnd) == mFull:
			s.eat(len(tThinkEnd))
			s.st = stAfterThink
			return true
		case match(b, tCall) == mFull:
			switch follows(b[len(tCall):], final, vNo, tFunc) {
			case vWait:
				return false
			case vYes:
				s.st = stContent // the call parser takes it from "<tool_call>"
				return true
			}
			s.text(&s.reason, b[:1])
			return true
		case !final: // a possible tag at the end
			return false
		}
		s.text(&s.reason, b)
		return true

	case stContent:
		if s.afterCall {
			// Whitespace after a call separates it from later text; it is
			// dropped at the end of output and when no content precedes.
			w := countWS(b)
			if w == len(b) && !final {
				return false
			}
			if w == len(b) || s.content.Len() == 0 {
				s.eat(w)
			}
			s.afterCall = false
			return true
		}
		k := findTag(b, tCall, tFunc, tThink, tThinkEnd, tCallEnd)
		// Hold the whitespace before a possible call: it is dropped if one follows.
		if t := len(strings.TrimRight(b[:k], ws)); t > 0 {
			n := s.avail(b[:t], t == len(b))
			s.text(&s.content, b[:n])
			return n > 0
		}
		if k == len(b) {
			if final && k > 0 {
				s.text(&s.content, b)
				return true
			}
			return false
		}
		r := b[k:]
		if match(r, tCall) == mNone && match(r, tFunc) == mNone {
			return s.stray(b, k)
		}
		v, n := s.callStart(r, final)
		switch v {
		case vWait:
			return false
		case vNo:
			if match(r, tCall) == mFull { // a <tool_call> that opens no call
				s.text(&s.content, b[:k])
				s.eat(s.noCall(r))
				return true
			}
			s.text(&s.content, b[:k+1])
		case vYes:
			s.eat(k + n)
		}
		return true

	case stCallBody:
		w := countWS(b)
		r := b[w:]
		switch {
		case r == "":
			if !final {
				return false
			}
			s.eat(w)
			s.closeCall()
			return true
		case r[0] != '<': // stray text between parameters
			i := strings.IndexByte(r, '<')
			if i < 0 {
				i = len(r)
			}
			s.eat(w + i)
			return true
		case match(r, tParam) == mFull:
			name, n, v := header(r, tParam)
			if v == vYes {
				s.eat(w + n)
				s.param = name
				s.val.Reset()
				s.st = stValue
				return true
			}
			if v == vWait && !final {
				return false
			}
		case match(r, tFuncEnd) == mFull:
			s.eat(w + len(tFuncEnd))
			s.closeCall()
			s.st = stCallEnd
			return true
		case match(r, tCallEnd) == mFull:
			s.eat(w + len(tCallEnd))
			s.closeCall()
			return true
		case match(r, tCall) == mFull || match(r, tFunc) == mFull: // next call
			s.eat(w)
			s.closeCall()
			return true
		case !final && (match(r, tParam) == mPart || match(r, tFuncEnd) == mPart ||
			match(r, tCallEnd) == mPart || match(r, tCall) == mPart || match(r, tFunc) == mPart):
			return false
		}
		s.eat(w + 1) // not a tag we know here: drop the '<' like other stray text
		return true

	case stValue:
		end, next, v := s.valueEnd(b, final)
		s.val.WriteString(b[:end])
		s.eat(next)
		if v == vYes || (v == vNo && final) {
			s.endParam()
			s.st = stCallBody
			return true
		}
		return next > 0

	case stCallEnd:
		w := countWS(b)
		switch match(b[w:], tCallEnd) {
		case mFull:
			s.eat(w + len(tCallEnd))
		case mPart: // also b[w:] == ""
			if !final {
				return false
			}
			s.eat(len(b)) // a partial </tool_call> at the very end
		}
		s.st = stContent
		return true
	}
	return false
}

// stray handles b[k:], which starts a <think>, </think> or </tool_call> (or may, with more
// text): markup that has no place in content. The tag is dropped, as the whitespace the real one
// carries after it (up to two "\n" after </think>; what follows a </tool_call> as after a call).
func (s *Stream) stray(b string, k int) bool {
	for _, tag := range []string{tThink, tThinkEnd, tCallEnd} {
		if match(b[k:], tag) != mFull {
			continue
		}
		s.text(&s.content, b[:k])
		s.eat(len(tag))
		switch tag {
		case tThinkEnd:
			s.nl, s.st = 0, stAfterThink
		case tCallEnd:
			s.afterCall = true
		}
		return true
	}
	if !s.final { // a partial tag at the end
		return false
	}
	s.text(&s.content, b[:k+1])
	return true
}

// noCall is how much of b, a "<tool_call>" that opens no call, to drop: the tag, and at the end of
// output also an unfinished "<function=NAME" header after it (a call the length limit cut off).
func (s *Stream) noCall(b string) int {
	rest := b[len(tCall):]
	h := rest[countWS(rest):]
	if s.final && (match(h, tFunc) == mPart || match(h, tFunc) == mFull && headerOpen(h)) {
		return len(b)
	}
	return len(tCall)
}

// headerOpen reports whether b, which starts with "<function=", ends before its header does.
func headerOpen(b string) bool {
	_, _, v := header(b, tFunc)
	return v == vWait
}

// callStart decides whether b, which starts with a possible "<tool_call>" or
// "<function=", starts a call; on vYes it has opened the call and n bytes of b
// are consumed.
func (s *Stream) callStart(b string, final bool) (v verdict, n int) {
	j := 0
	if match(b, tFunc) == mNone {
		if match(b, tCall) == mPart {
			return waitOrNo(final)
		}
		j = len(tCall) + countWS(b[len(tCall):])
		if j < len(b) && b[j] == '{' {
			return s.jsonCall(b, j, final)
		}
	}
	switch match(b[j:], tFunc) {
	case mNone:
		return vNo, 0
	case mPart:
		return waitOrNo(final)
	}
	name, hn, v := header(b[j:], tFunc)
	if v == vWait {
		return waitOrNo(final)
	}
	if v == vNo {
		return vNo, 0
	}
	if j == 0 { // bare: only a call if a tag follows, so prose may mention <function=x>
		r := b[hn:]
		w := countWS(r)
		if w == len(r) {
			return waitOrNo(final)
		}
		if r[w] != '<' {
			return vNo, 0
		}
	}
	s.openCall(name)
	s.st = stCallBody
	return vYes, j + hn
}

// jsonCall handles a Hermes-style call: b[j:] starts with '{'.
func (s *Stream) jsonCall(b string, j int, final bool) (verdict, int) {
	end, v := s.js.scan(b[j:])
	if v == vWait {
		return waitOrNo(final)
	}
	name, args, ok := hermes(b[j : j+end])
	if !ok {
		return vNo, 0
	}
	n := j + end
	w := countWS(b[n:])
	switch match(b[n+w:], tCallEnd) {
	case mFull:
		n += w + len(tCallEnd)
	case mPart:
		if !final {
			return vWait, 0
		}
		n = len(b)
	}
	s.openCall(name)
	s.args(args)
	s.open = nil
	s.afterCall = true
	return vYes, n
}

// valueEnd finds where the open parameter value ends in b: the value text is
// b[:end] and next bytes are consumed. vWait: b[:end] is value, the rest is
// undecided; vNo: all of b is value.
func (s *Stream) valueEnd(b string, final bool) (end, next int, v verdict) {
	for i := 0; ; i++ {
		j := strings.IndexByte(b[i:], '<')
		if j < 0 {
			return len(b), len(b), vNo
		}
		i += j
		for _, e := range valueEnds {
			if e.follow == nil && !s.lineStart(b, i) {
				continue
			}
			switch match(b[i:], e.tag) {
			case mPart:
				if !final {
					return i, i, vWait
				}
				return i, len(b), vYes // a closing tag cut off by the end of output
			case mFull:
				f := vYes
				if e.follow != nil {
					f = follows(b[i+len(e.tag):], final, vYes, e.follow...)
				}
				switch f {
				case vWait:
					return i, i, vWait
				case vYes:
					if e.tag == tParamEnd {
						return i, i + len(tParamEnd), vYes
					}
					return i, i, vYes // the call body parser reads this tag
				}
			}
		}
	}
}

func (s *Stream) lineStart(b string, i int) bool {
	if i > 0 {
		return b[i-1] == '\n'
	}
	v := s.val.String()
	return strings.HasSuffix(v, "\n")
}

func (s *Stream) endParam() {
	raw := s.val.String()
	raw = strings.TrimPrefix(raw, "\n")
	raw = strings.TrimSuffix(raw, "\n")
	sep := ", "
	if s.open.params == 0 {
		sep = "{"
	}
	s.open.params++
	s.args(sep + jsonString(s.param) + ": " + convert(raw, s.open.types[s.param]))
}

func (s *Stream) openCall(name string) {
	c := &call{ToolCall: ToolCall{Index: len(s.calls), ID: s.newID(), Name: name}, types: s.types[name]}
	s.calls = append(s.calls, c)
	s.open = c
	s.out = append(s.out, Delta{ToolCall: &ToolCallDelta{Index: c.Index, ID: c.ID, Name: name}})
}

func (s *Stream) closeCall() {
	if s.open.params == 0 {
		s.args("{}")
	} else {
		s.args("}")
	}
	s.open = nil
	s.afterCall = true
	s.st = stContent
}

// args appends an Arguments fragment to the newest call.
func (s *Stream) args(frag string) {
	c := s.calls[len(s.calls)-1]
	c.args.WriteString(frag)
	if n := len(s.out); n > 0 {
		if d := s.out[n-1].ToolCall; d != nil && d.Index == c.Index && d.ID == "" {
			d.Arguments += frag
			return
		}
	}
	s.out = append(s.out, Delta{ToolCall: &ToolCallDelta{Index: c.Index, Arguments: frag}})
}

// text emits t (the front of buf) as content or reasoning and consumes it.
func (s *Stream) text(to *strings.Builder, t string) {
	s.eat(len(t))
	if t == "" {
		return
	}
	to.WriteString(t)
	reasoning := to == &s.reason
	if n := len(s.out); n > 0 {
		d := &s.out[n-1]
		if reasoning && d.Reasoning != "" {
			d.Reasoning += t
			return
		}
		if !reasoning && d.Content != "" {
			d.Content += t
			return
		}
	}
	if reasoning {
		s.out = append(s.out, Delta{Reasoning: t})
	} else {
		s.out = append(s.out, Delta{Content: t})
	}
}

func (s *Stream) eat(n int) {
	if n > 0 {
		s.buf = s.buf[n:]
		s.js = jsonScan{}
	}
}

// avail returns how much of t can be emitted: all of it unless it reaches the
// end of buf mid-way through a UTF-8 sequence.
func (s *Stream) avail(t string, atEnd bool) int {
	if !atEnd || s.final {
		return len(t)
	}
	for k := 1; k <= 3 && k <= len(t); k++ {
		c := t[len(t)-k]
		if c < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRuneInString(t[len(t)-k:]) {
				return len(t) - k
			}
			break
		}
	}
	return len(t)
}

type matchKind uint8

const (
	mNone matchKind = iota
	mPart           // b is a proper prefix of the tag (b may be "")
	mFull           // b starts with the tag
)

func match(b, tag string) matchKind {
	switch {
	case strings.HasPrefix(b, tag):
		return mFull
	case strings.HasPrefix(tag, b):
		return mPart
	}
	return mNone
}

// findTag returns the index of the first '<' in b that starts one of tags, or
// could start one with more text; len(b) if none.
func findTag(b string, tags ...string) int {
	for i := 0; ; i++ {
		j := strings.IndexByte(b[i:], '<')
		if j < 0 {
			return len(b)
		}
		i += j
		for _, t := range tags {
			if match(b[i:], t) != mNone {
				return i
			}
		}
	}
}

type verdict uint8

const (
	vWait verdict = iota // undecided until more text arrives
	vYes
	vNo
)

func waitOrNo(final bool) (verdict, int) {
	if final {
		return vNo, 0
	}
	return vWait, 0
}

// follows reports whether r, after whitespace, starts with one of tags; eof is
// the answer when the output ends before that is known.
func follows(r string, final bool, eof verdict, tags ...string) verdict {
	r = strings.TrimLeft(r, ws)
	for _, t := range tags {
		switch match(r, t) {
		case mFull:
			return vYes
		case mPart:
			if final {
				return eof
			}
			return vWait
		}
	}
	return vNo
}

// header reads "TAG NAME>" at the start of b (b starts with tag) and returns
// the trimmed name and the header length.
func header(b, tag string) (name string, n int, v verdict) {
	rest := b[len(tag):]
	for i := 0; i < len(rest) && i <= maxName; i++ {
		switch rest[i] {
		case '>':
			name = strings.TrimSpace(rest[:i])
			if name == "" || strings.ContainsAny(name, ws) {
				return "", 0, vNo
			}
			return name, len(tag) + i + 1, vYes
		case '<', '\n':
			return "", 0, vNo
		}
	}
	if len(rest) > maxName {
		return "", 0, vNo
	}
	return "", 0, vWait
}

func countWS(b string) int { return len(b) - len(strings.TrimLeft(b, ws)) }
