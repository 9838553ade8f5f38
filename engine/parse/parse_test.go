package parse

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

var testTools = []Tool{
	{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{
		"city":{"type":"string"},"days":{"type":"integer"},"units":{"type":["string","null"]},
		"verbose":{"type":"boolean"},"opts":{"type":"object"},"tags":{"type":"array"},
		"ratio":{"anyOf":[{"type":"number"},{"type":"null"}]}}}`)},
	{Name: "run", Parameters: json.RawMessage(`{"type":"object","properties":{"code":{"type":"string"}}}`)},
	{Name: "noargs"},
}

// seqIDs returns deterministic call IDs: id(1), id(2), …
func seqIDs() func() string {
	n := 0
	return func() string { n++; return id(n) }
}

func id(n int) string { return fmt.Sprintf("call_%024x", n) }

func opts(think bool) Options {
	return Options{PromptEndsInThink: think, Tools: testTools, NewID: seqIDs()}
}

func tc(i int, name, args string) ToolCall {
	return ToolCall{Index: i, ID: id(i + 1), Name: name, Arguments: args}
}

// Every documented case, including each malformed variant.
var cases = []struct {
	name  string
	think bool
	in    string
	want  Result
}{
	// Reasoning.
	{"content only", false, "Hello, world.", Result{Content: "Hello, world."}},
	{"empty think", true, "", Result{}},
	{"empty nothink", false, "", Result{}},
	{"reasoning then content", true, "Let me see.\n</think>\n\nIt is 4.", Result{Reasoning: "Let me see.\n", Content: "It is 4."}},
	{"leading think stripped", true, "<think>\nhm\n</think>\n\nok", Result{Reasoning: "hm\n", Content: "ok"}},
	{"leading think no newline", true, "<think>hm</think>ok", Result{Reasoning: "hm", Content: "ok"}},
	{"only two newlines stripped", true, "a</think>\n\n\nb", Result{Reasoning: "a", Content: "\nb"}},
	{"one newline stripped", true, "a</think>\nb ", Result{Reasoning: "a", Content: "b "}},
	{"truncated reasoning", true, "still thinking <tool", Result{Reasoning: "still thinking <tool"}},
	{"truncated end tag", true, "abc</thi", Result{Reasoning: "abc</thi"}},
	{"think tags when thinking off are dropped", false, "<think>x</think>y", Result{Content: "xy"}},
	{"a second </think> is dropped", true, "a</think>\n\nb</think>c", Result{Reasoning: "a", Content: "bc"}},
	{"stray </think> takes its newlines", false, "b\n</think>\n\nc", Result{Content: "b\nc"}},
	{"stray </tool_call> is dropped", false, "a</tool_call>\nb", Result{Content: "a\nb"}},
	{"tags in reasoning stay text", true, "use <function=x> or <tool_call>{ or <tool_call> later</think>\n\nok",
		Result{Reasoning: "use <function=x> or <tool_call>{ or <tool_call> later", Content: "ok"}},
	{"unicode", true, "思考 é\n</think>\n\n答案 ✓", Result{Reasoning: "思考 é\n", Content: "答案 ✓"}},
	{"lt in text", false, "a < b and c<d <tool_call x", Result{Content: "a < b and c<d <tool_call x"}},

	// Well-formed calls.
	{"one call", true, "r\n</think>\n\nI'll check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
		Result{Reasoning: "r\n", Content: "I'll check.", ToolCalls: []ToolCall{tc(0, "get_weather", `{"city": "Paris", "days": 3}`)}}},
	{"typed values", false, "<tool_call>\n<function=get_weather>\n<parameter=units>\nnull\n</parameter>\n<parameter=verbose>\nTrue\n</parameter>\n<parameter=opts>\n{'a': [1, 2.5], 'b': None}\n</parameter>\n<parameter=tags>\n[\"x\", \"y\"]\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "get_weather", `{"units": null, "verbose": true, "opts": {"a": [1, 2.5], "b": null}, "tags": ["x","y"], "ratio": 0.5, "days": "three"}`)}}},
	{"multiline value", false, "<tool_call>\n<function=run>\n<parameter=code>\n\nfor i in x:\n    print(i)\n\n</parameter>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "run", `{"code": "\nfor i in x:\n    print(i)\n"}`)}}},
	{"two calls", false, "<tool_call>\n<function=run>\n<parameter=code>\na\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>\n",
		Result{ToolCalls: []ToolCall{tc(0, "run", `{"code": "a"}`), tc(1, "get_weather", `{"city": "Rome"}`)}}},
	{"no parameters", false, "<tool_call>\n<function=noargs>\n</function>\n</tool_call>", Result{ToolCalls: []ToolCall{tc(0, "noargs", `{}`)}}},
	{"html in value not escaped", false, "<tool_call>\n<function=run>\n<parameter=code>\n<b>&</b>\n</parameter>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "run", `{"code": "<b>&</b>"}`)}}},

	// Malformed variants.
	{"bare function", false, "Sure.\n<function=run>\n<parameter=code>\nls\n</parameter>\n</function>",
		Result{Content: "Sure.", ToolCalls: []ToolCall{tc(0, "run", `{"code": "ls"}`)}}},
	{"bare function then text", false, "<function=run>\n<parameter=code>\nls\n</parameter>\n</function>\nDone.",
		Result{Content: "Done.", ToolCalls: []ToolCall{tc(0, "run", `{"code": "ls"}`)}}},
	{"bare function in prose", false, "Write <function=name> then\n<function=x>", Result{Content: "Write <function=name> then\n<function=x>"}},
	{"hermes json", false, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"q\": \"}</tool_call>\"}}\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "get_weather", `{"city":"Paris","q":"}</tool_call>"}`)}}},
	{"hermes string arguments", false, "<tool_call>{\"name\": \"run\", \"arguments\": \"{\\\"code\\\": \\\"ls\\\"}\"}</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "run", `{"code":"ls"}`)}}},
	{"hermes no arguments, no end tag", false, "<tool_call>\n{\"name\": \"noargs\"}",
		Result{ToolCalls: []ToolCall{tc(0, "noargs", `{}`)}}},
	{"hermes invalid is content, without the tags", false, "<tool_call>\n{\"nam\": 1}\n</tool_call>", Result{Content: "\n{\"nam\": 1}\n"}},
	{"hermes unterminated is content, without the tag", false, "<tool_call>\n{\"name\": \"run\", ", Result{Content: "\n{\"name\": \"run\", "}},
	{"text after call", false, "<tool_call>\n<function=noargs>\n</function>\n</tool_call>\n\nAll done.",
		Result{Content: "All done.", ToolCalls: []ToolCall{tc(0, "noargs", `{}`)}}},
	{"text before and after call", false, "Checking.\n\n<tool_call>\n<function=noargs>\n</function>\n</tool_call>\nDone.",
		Result{Content: "Checking.\nDone.", ToolCalls: []ToolCall{tc(0, "noargs", `{}`)}}},
	{"open parameter header", false, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=da",
		Result{ToolCalls: []ToolCall{tc(0, "get_weather", `{"city": "Paris"}`)}}},
	{"open parameter value", false, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
		Result{ToolCalls: []ToolCall{tc(0, "get_weather", `{"city": "Par"}`)}}},
	{"value cut in end tag", false, "<tool_call>\n<function=get_weather>\n<parameter=days>\n12\n</param",
		Result{ToolCalls: []ToolCall{tc(0, "get_weather", `{"days": 12}`)}}},
	{"missing function end", false, "<tool_call>\n<function=run>\n<parameter=code>\nx\n</parameter>\n",
		Result{ToolCalls: []ToolCall{tc(0, "run", `{"code": "x"}`)}}},
	{"missing tool_call end", false, "<tool_call>\n<function=run>\n<parameter=code>\nx\n</parameter>\n</function>\n</tool_",
		Result{ToolCalls: []ToolCall{tc(0, "run", `{"code": "x"}`)}}},
	{"a call cut off in its header is dropped", false, "Hi\n<tool_call>\n<function=get_wea", Result{Content: "Hi\n"}},
	{"a call cut off before its header is dropped", false, "Hi\n<tool_call>\n<func", Result{Content: "Hi\n"}},
	{"lone tool_call is dropped", false, "Hi <tool_call>", Result{Content: "Hi "}},
	{"tool_call token in prose is dropped", false, "The <tool_call> tag starts calls.", Result{Content: "The  tag starts calls."}},
	{"bad function name is content", false, "<function=a b>x", Result{Content: "<function=a b>x"}},
	{"param end missing before param", false, "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "get_weather", `{"city": "Oslo", "days": 2}`)}}},
	{"param end missing before function end", false, "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "get_weather", `{"city": "Oslo"}`)}}},
	{"param and function end missing", false, "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</tool_call>\n<tool_call>\n<function=noargs>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "get_weather", `{"city": "Oslo"}`), tc(1, "noargs", `{}`)}}},
	{"function end inside value", false, "<tool_call>\n<function=run>\n<parameter=code>\necho '</function>'\n</function>\nx\n</parameter>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "run", `{"code": "echo '</function>'\n</function>\nx"}`)}}},
	{"param end inside value", false, "<tool_call>\n<function=run>\n<parameter=code>\ns = \"</parameter>\"\n</parameter> + 1 <parameter=x> no\n</parameter>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "run", `{"code": "s = \"</parameter>\"\n</parameter> + 1 <parameter=x> no"}`)}}},
	{"tool call inside reasoning", true, "I should call it.\n<tool_call>\n<function=run>\n<parameter=code>\nls\n</parameter>\n</function>\n</tool_call>",
		Result{Reasoning: "I should call it.\n", ToolCalls: []ToolCall{tc(0, "run", `{"code": "ls"}`)}}},
	{"unknown tool", false, "<tool_call>\n<function=mystery>\n<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "mystery", `{"n": "5"}`)}}},
	{"unknown parameter", false, "<tool_call>\n<function=get_weather>\n<parameter=zip>\n01234\n</parameter>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "get_weather", `{"zip": "01234"}`)}}},
	{"function end missing before next call", false, "<tool_call>\n<function=run>\n<parameter=code>\na\n</parameter>\n<tool_call>\n<function=noargs>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "run", `{"code": "a"}`), tc(1, "noargs", `{}`)}}},
	{"stray text between parameters", false, "<tool_call>\n<function=run>\nhmm <x>\n<parameter=code>\na\n</parameter>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "run", `{"code": "a"}`)}}},
	{"duplicate parameter", false, "<tool_call>\n<function=run>\n<parameter=code>\na\n</parameter>\n<parameter=code>\nb\n</parameter>\n</function>\n</tool_call>",
		Result{ToolCalls: []ToolCall{tc(0, "run", `{"code": "a", "code": "b"}`)}}},
}

func TestParse(t *testing.T) {
	for _, c := range cases {
		got := Parse(c.in, opts(c.think))
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %#v\nwant %#v", c.name, got, c.want)
		}
	}
}

// stream feeds the chunks and checks the delta invariants; it returns the
// result assembled from the deltas alone.
func stream(t testing.TB, chunks []string, opt Options) Result {
	t.Helper()
	s := NewStream(opt)
	var r Result
	var content, reasoning strings.Builder
	var all []Delta
	for _, c := range chunks {
		all = append(all, s.Feed(c)...)
	}
	all = append(all, s.Finish()...)
	if s.Feed("more") != nil || s.Finish() != nil {
		t.Fatal("Stream accepts text after Finish")
	}
	valid := utf8.ValidString(strings.Join(chunks, ""))
	for _, d := range all {
		set := 0
		for _, f := range []bool{d.Content != "", d.Reasoning != "", d.ToolCall != nil} {
			if f {
				set++
			}
		}
		if set != 1 {
			t.Fatalf("delta %+v sets %d fields", d, set)
		}
		if valid && !utf8.ValidString(d.Content+d.Reasoning) {
			t.Fatalf("delta %q splits a UTF-8 sequence", d.Content+d.Reasoning)
		}
		content.WriteString(d.Content)
		reasoning.WriteString(d.Reasoning)
		tcd := d.ToolCall
		switch {
		case tcd == nil:
		case tcd.Index == len(r.ToolCalls): // a new call
			if tcd.ID == "" || tcd.Name == "" || tcd.Arguments != "" {
				t.Fatalf("first delta of call %d: %+v", tcd.Index, *tcd)
			}
			r.ToolCalls = append(r.ToolCalls, ToolCall{Index: tcd.Index, ID: tcd.ID, Name: tcd.Name})
		case tcd.Index == len(r.ToolCalls)-1 && tcd.ID == "" && tcd.Name == "" && tcd.Arguments != "":
			r.ToolCalls[tcd.Index].Arguments += tcd.Arguments
		default:
			t.Fatalf("unexpected tool call delta %+v after %d calls", *tcd, len(r.ToolCalls))
		}
	}
	r.Content, r.Reasoning = content.String(), reasoning.String()
	for _, c := range r.ToolCalls {
		var m map[string]any
		if err := json.Unmarshal([]byte(c.Arguments), &m); err != nil {
			t.Fatalf("call %d arguments %q: %v", c.Index, c.Arguments, err)
		}
	}
	if got := s.Result(); !reflect.DeepEqual(got, r) {
		t.Fatalf("Result() %#v differs from the deltas %#v", got, r)
	}
	return r
}

// checkChunks asserts that streaming text in these chunks gives Parse(text).
func checkChunks(t testing.TB, chunks []string, think bool) {
	t.Helper()
	want := Parse(strings.Join(chunks, ""), opts(think))
	if got := stream(t, chunks, opts(think)); !reflect.DeepEqual(got, want) {
		t.Fatalf("chunks %q:\n got %#v\nwant %#v", chunks, got, want)
	}
}

func bytesOf(s string) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i : i+1]
	}
	return out
}

func TestStreamEverySplit(t *testing.T) {
	for _, c := range cases {
		for _, think := range []bool{c.think, !c.think} {
			for i := 0; i <= len(c.in); i++ {
				checkChunks(t, []string{c.in[:i], c.in[i:]}, think)
			}
			checkChunks(t, bytesOf(c.in), think)
		}
	}
}

func TestStreamRandomChunks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		for range 20 {
			checkChunks(t, randomChunks(rng, c.in, 6), c.think)
		}
	}
}

func randomChunks(rng *rand.Rand, s string, max int) []string {
	var out []string
	for s != "" {
		n := min(1+rng.IntN(max), len(s))
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// TestStreamLatency checks what is held back: only possible tags, trailing
// content whitespace and incomplete UTF-8.
func TestStreamLatency(t *testing.T) {
	type step struct{ feed, content, reasoning string }
	for _, tt := range []struct {
		think bool
		steps []step
	}{
		{true, []step{{"<thi", "", ""}, {"nk>\nA b", "", "A b"}, {" <", "", " "}, {"/think", "", ""}, {">\n", "", ""}, {"\nHi <", "Hi", ""}, {"b>", " <b>", ""}}},
		{true, []step{{"x <tool_call>\n", "", "x "}, {" <func", "", ""}, {"tion=run>\n", "", ""}}},
		{true, []step{{"x <tool_call>\n", "", "x "}, {"hm", "", "<tool_call>\nhm"}}},
		{false, []step{{"a\n\n", "a", ""}, {"b <tool_call", "\n\nb", ""}, {"> x", "  x", ""}}},
		{false, []step{{"é\xe4\xbd", "é", ""}, {"\xa0!", "你!", ""}}},
	} {
		s := NewStream(opts(tt.think))
		for _, st := range tt.steps {
			var c, r string
			for _, d := range s.Feed(st.feed) {
				c += d.Content
				r += d.Reasoning
			}
			if c != st.content || r != st.reasoning {
				t.Errorf("after %q: content %q reasoning %q, want %q %q", st.feed, c, r, st.content, st.reasoning)
			}
		}
	}
}

// TestStreamToolDeltas checks the shape of a call's deltas: ID and name as
// soon as the header is complete, then one fragment per finished parameter.
func TestStreamToolDeltas(t *testing.T) {
	s := NewStream(opts(false))
	feeds := []string{"<tool_call>\n<function=get_weather", ">\n<parameter=city>\nParis\n</parameter>", "\n<",
		"parameter=days>\n3\n</parameter>\n", "</function>", "\n</tool_call>"}
	want := [][]ToolCallDelta{
		nil,
		{{ID: id(1), Name: "get_weather"}},
		nil, // "</parameter>" ends the value only if "<parameter=" or "</function>" … follows
		{{Arguments: `{"city": "Paris"`}},
		{{Arguments: `, "days": 3}`}},
		nil,
	}
	for i, f := range feeds {
		var got []ToolCallDelta
		for _, d := range s.Feed(f) {
			if d.ToolCall == nil {
				t.Fatalf("feed %d: non-call delta %+v", i, d)
			}
			got = append(got, *d.ToolCall)
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("feed %d: got %+v want %+v", i, got, want[i])
		}
		if i == 3 {
			if r := s.Result(); len(r.ToolCalls) != 1 || r.ToolCalls[0].Arguments != `{"city": "Paris"` {
				t.Errorf("Result() mid-call: %+v", r)
			}
		}
	}
	if d := s.Finish(); d != nil {
		t.Errorf("Finish: %+v", d)
	}
}

func TestDefaultID(t *testing.T) {
	r := Parse("<function=noargs>\n</function><function=noargs>\n</function>", Options{})
	a, b := r.ToolCalls[0].ID, r.ToolCalls[1].ID
	if len(a) != 29 || !strings.HasPrefix(a, "call_") || strings.Trim(a[5:], "0123456789abcdef") != "" || a == b {
		t.Errorf("ids %q %q", a, b)
	}
}

// gen builds a random well-formed output and its expected parse. Its texts
// are made of pieces that look like tags but are not (as models write about code).
type gen struct {
	rng *rand.Rand
}

var textPieces = []string{"a", "b c", " ", "\n", "<", ">", "</", "<b>", "x<y", "é", "世界", "<think", "</thin", "<tool", "<tool_call", "<function", "<function x", "</function>.", "</parameter>;", "<parameter=", "tool_call>", "{", "}", "\"", "<tool_call>{"}

func (g *gen) text(n int, bad ...string) string {
	for {
		var b strings.Builder
		for range n {
			b.WriteString(textPieces[g.rng.IntN(len(textPieces))])
		}
		s, ok := b.String(), true
		for _, a := range bad {
			ok = ok && !strings.Contains(s, a)
		}
		if ok {
			return s
		}
	}
}

// value returns a parameter value of the given kind as written and as JSON.
func (g *gen) value(kind string) (raw, js string) {
	switch kind {
	case "integer":
		n := g.rng.IntN(2000) - 1000
		return fmt.Sprint(n), fmt.Sprint(n)
	case "boolean":
		b := g.rng.IntN(2)
		return []string{"true", "False"}[b], []string{"true", "false"}[b]
	case "object":
		if g.rng.IntN(2) == 0 {
			return "{'k': [1, 'two', None, False], \"q\": (3,)}", `{"k": [1, "two", null, false], "q": [3]}`
		}
		return "{\"a\": {\"b\": [true, 1.5e3]}}", `{"a":{"b":[true,1.5e3]}}`
	case "nullable":
		if g.rng.IntN(3) == 0 {
			return "null", "null"
		}
	}
	for {
		s := g.text(1+g.rng.IntN(12), "\n<parameter=", "</tool_call>")
		if !strings.HasPrefix(s, "<parameter=") {
			return s, jsonString(s)
		}
	}
}

var genParams = []struct{ name, kind string }{
	{"city", "string"}, {"days", "integer"}, {"verbose", "boolean"}, {"opts", "object"}, {"units", "nullable"}, {"note", "unknown"},
}

func (g *gen) output(think bool) (string, Result) {
	var in strings.Builder
	var want Result
	if think {
		if g.rng.IntN(2) == 0 {
			in.WriteString("<think>\n")
		}
		want.Reasoning = g.text(g.rng.IntN(30), "</think>", "<tool_call>")
		for strings.HasPrefix(want.Reasoning, "<think>") {
			want.Reasoning = want.Reasoning[1:]
		}
		in.WriteString(want.Reasoning + "</think>\n\n")
	}
	calls := g.rng.IntN(4)
	if g.rng.IntN(2) == 0 {
		c := "x" + g.text(g.rng.IntN(30), "<tool_call>", "<function=", "<think>", "</think>", "</tool_call>")
		in.WriteString(c + "\n\n")
		want.Content = c + "\n\n"
		if calls > 0 {
			want.Content = strings.TrimRight(c, ws)
		}
	}
	for i := range calls {
		in.WriteString("<tool_call>\n<function=get_weather>\n")
		args := "{"
		for _, p := range genParams {
			if g.rng.IntN(3) == 0 {
				continue
			}
			raw, js := g.value(p.kind)
			if args != "{" {
				args += ", "
			}
			args += fmt.Sprintf("%q: %s", p.name, js)
			fmt.Fprintf(&in, "<parameter=%s>\n%s\n</parameter>\n", p.name, raw)
		}
		if args == "{" {
			args = "{}"
		} else {
			args += "}"
		}
		in.WriteString("</function>\n</tool_call>\n")
		want.ToolCalls = append(want.ToolCalls, tc(i, "get_weather", args))
	}
	return in.String(), want
}

func TestGenerated(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(3, 4))}
	for range 300 {
		think := g.rng.IntN(2) == 0
		in, want := g.output(think)
		if got := Parse(in, opts(think)); !reflect.DeepEqual(got, want) {
			t.Fatalf("input %q:\n got %#v\nwant %#v", in, got, want)
		}
		checkChunks(t, randomChunks(g.rng, in, 1+g.rng.IntN(12)), think)
	}
}

func TestLongOutput(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(5, 6))}
	var in strings.Builder
	in.WriteString(g.text(20000) + "</think>\n\n")
	for range 50 {
		s, _ := g.output(false)
		in.WriteString(s)
	}
	checkChunks(t, randomChunks(g.rng, in.String(), 8), true)
}

func FuzzStream(f *testing.F) {
	for _, c := range cases {
		f.Add(c.in, []byte{3, 1, 7}, c.think)
	}
	f.Fuzz(func(t *testing.T, in string, cuts []byte, think bool) {
		var chunks []string
		for i := 0; in != ""; i++ {
			n := 1
			if len(cuts) > 0 {
				n = int(cuts[i%len(cuts)])%16 + 1
			}
			n = min(n, len(in))
			chunks = append(chunks, in[:n])
			in = in[n:]
		}
		checkChunks(t, chunks, think)
	})
}

// TestContentHasNoMarkup: whatever the model writes, content never carries Qwen's markup
// tokens, parsed whole or streamed in chunks.
func TestContentHasNoMarkup(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(5, 6))}
	pieces := append([]string{"<tool_call>", "</tool_call>", "<think>", "</think>", "\n<function=f>\n", "<function=", "\n\n"}, textPieces...)
	for range 2000 {
		var b strings.Builder
		for range 1 + g.rng.IntN(12) {
			b.WriteString(pieces[g.rng.IntN(len(pieces))])
		}
		in, think := b.String(), g.rng.IntN(2) == 0
		r := Parse(in, opts(think))
		for _, tag := range []string{tCall, tCallEnd, tThink, tThinkEnd} {
			if strings.Contains(r.Content, tag) {
				t.Fatalf("input %q (thinking %v): content %q holds %s", in, think, r.Content, tag)
			}
		}
		checkChunks(t, randomChunks(g.rng, in, 1+g.rng.IntN(8)), think)
	}
}
