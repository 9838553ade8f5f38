package grammar

import (
	"encoding/json"
	"errors"
	"math/rand"
	"strings"
	"testing"
)

func mustTools(tb testing.TB, mode ToolMode, name string) *Grammar {
	tb.Helper()
	g, err := ToolCalls(claudeTools, mode, name)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

func TestToolCallGrammar(t *testing.T) {
	g := mustTools(t, ToolsRequired, "")
	call := "<tool_call>\n<function=Read>\n<parameter=file_path>\n/a b/c.go\n</parameter>\n<parameter=limit>\n20\n</parameter>\n</function>\n</tool_call>"
	accepts(t, g, call, call+"\n"+call,
		"<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
		"<tool_call>\n<function=Edit>\n<parameter=file_path>\nx\n</parameter>\n<parameter=old_string>\na\n\nb\n</parameter>\n<parameter=new_string>\n\n</parameter>\n<parameter=replace_all>\ntrue\n</parameter>\n</function>\n</tool_call>",
		"<tool_call>\n<function=TodoWrite>\n<parameter=todos>\n[{\"content\":\"x\",\"status\":\"pending\",\"id\":\"1\"}]\n</parameter>\n</function>\n</tool_call>",
		"<tool_call>\n<function=set_level>\n<parameter=level>\nnull\n</parameter>\n<parameter=mode>\nfast\n</parameter>\n</function>\n</tool_call>")
	rejects(t, g, "",
		"hello",
		"<tool_call>\n<function=Nope>\n</function>\n</tool_call>",
		"<tool_call>\n<function=Read>\n</function>\n</tool_call>",                                                                             // required file_path
		"<tool_call>\n<function=Read>\n<parameter=limit>\n2\n</parameter>\n<parameter=file_path>\nx\n</parameter>\n</function>\n</tool_call>", // order
		"<tool_call>\n<function=Read>\n<parameter=file_path>\nx</function>\n</parameter>\n</function>\n</tool_call>",                          // a tag in raw text
		"<tool_call>\n<function=Read>\n<parameter=file_path>\nx\n</parameter>\n<parameter=limit>\n0\n</parameter>\n</function>\n</tool_call>", // exclusiveMinimum
		"<tool_call>\n<function=set_level>\n<parameter=level>\n7\n</parameter>\n<parameter=mode>\nfast\n</parameter>\n</function>\n</tool_call>",
		"<tool_call>\n<function=set_level>\n<parameter=level>\n1\n</parameter>\n<parameter=mode>\nmedium\n</parameter>\n</function>\n</tool_call>",
		call+"\n\n"+call, call+"x")
	// The byte spelling of <tool_call> is not the added token.
	m, _ := g.NewMatcher(byteVocab, 100)
	if m.Accept('<') == nil {
		t.Error("'<' accepted where the added token <tool_call> must come")
	}

	named := mustTools(t, ToolsNamed, "Read")
	accepts(t, named, "<parameter=file_path>\nx\n</parameter>\n</function>\n</tool_call>")
	rejects(t, named, "</function>\n</tool_call>", "<parameter=file_path>\nx\n</parameter>\n</function>\n</tool_call>\n"+call)
	if _, err := ToolCalls(claudeTools, ToolsNamed, "Missing"); err == nil {
		t.Error("a named tool that is not among the tools compiled")
	}

	auto := mustTools(t, ToolsAuto, "")
	accepts(t, auto, "", "Just text, no call.", "Let me look.\n\n"+call+"\nDone.")
	rejects(t, auto, "Text <function=Read>\n", "a <tool_call>") // byte spellings of tags in text
}

func TestToolCompileErrors(t *testing.T) {
	for _, c := range []struct {
		tools []Tool
		want  string
	}{
		{[]Tool{{Name: "bad name"}}, "cannot be written"},
		{[]Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"a b":{"type":"string"}}}`)}}, "cannot be written"},
		{[]Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","not":{}}}}`)}}, "not"},
		{[]Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object","required":["x"]}`)}}, `required parameter "x"`},
		{[]Tool{{Name: "f", Parameters: json.RawMessage(`{"anyOf":[{"type":"object"}]}`)}}, "anyOf"},
		{[]Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"o":{"$ref":"#/$defs/o"}},"$defs":{"o":{"type":"object"}}}`)}}, "no allowed type"},
		{nil, "no tools"},
	} {
		_, err := ToolCalls(c.tools, ToolsRequired, "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.tools, err, c.want)
		}
	}
}

// TestMaskMatchesAccept checks, in states along random generations, that the mask holds exactly
// the tokens Accept takes and after which the completion fits the budget.
func TestMaskMatchesAccept(t *testing.T) {
	_, v := qwen(t)
	r := rand.New(rand.NewSource(3))
	grammars := []*Grammar{mustSchema(t, acceptanceSchemas[3]), mustSchema(t, acceptanceSchemas[8]),
		mustSchema(t, acceptanceSchemas[9]), JSONObject(), mustTools(t, ToolsRequired, ""), mustTools(t, ToolsAuto, "")}
	mask := make([]uint64, v.MaskWords())
	checked := 0
	for gi, g := range grammars {
		budget := g.MinTokens(v) + 40
		m, err := g.NewMatcher(v, budget)
		if err != nil {
			t.Fatal(err)
		}
		for left := budget; left > 0 && !m.Ended(); left-- {
			m.Mask(mask, left)
			if left%11 == 0 || left < 3 {
				checked++
				for id := range v.Size() {
					allowed := mask[id>>6]>>(id&63)&1 != 0
					ok := false
					if v.bytes[id] != nil {
						c := *m
						c.stk = append([]frame(nil), m.stk...)
						c.tmp = nil
						ok = c.Accept(id) == nil && (c.Ended() || c.MinTokens() <= left-1)
					}
					if ok && !allowed && overCounted(m, v, id) {
						continue // the mask counts a token's lead bytes as characters: \n counts 2
					}
					if allowed != ok {
						t.Fatalf("grammar %d in %v, %d left: token %d %q: mask %v, accept %v", gi, m.stk, left, id, v.bytes[id], allowed, ok)
					}
				}
			}
			if err := m.Accept(pick(v, mask, r)); err != nil {
				t.Fatal(err)
			}
		}
		if !m.Ended() {
			t.Errorf("grammar %d: no EOS within the budget", gi)
		}
	}
	t.Logf("%d states checked against all %d ids", checked, v.Size())
}

// overCounted reports whether the mask may leave out id because, under a maxLength, it bounds the
// token's characters by its lead bytes.
func overCounted(m *Matcher, v *Vocab, id int) bool {
	top := m.stk[len(m.stk)-1]
	n := &m.g.nodes[top.n]
	return n.kind == kLeaf && n.maxCh >= 0 && int32(v.lead[id]) > n.maxCh-top.a
}

func TestSpecialTokens(t *testing.T) {
	tok, v := qwen(t)
	g := mustSchema(t, `{"type":"string"}`)
	m, _ := g.NewMatcher(v, 100)
	mask := make([]uint64, v.MaskWords())
	check := func(state string, eosOK bool) {
		m.Mask(mask, 100)
		for id := range v.Size() {
			if !v.isAdded[id] {
				continue
			}
			allowed := mask[id>>6]>>(id&63)&1 != 0
			if want := eosOK && v.isEOS(id); allowed != want {
				s, _ := tok.Token(id)
				t.Errorf("%s: added token %d %q allowed %v", state, id, s, allowed)
			}
		}
	}
	check("start", false)
	for _, id := range tok.Encode(`"a b`) {
		if err := m.Accept(id); err != nil {
			t.Fatal(err)
		}
	}
	check("string", false)
	think, _ := tok.TokenID("<think>")
	if m.Accept(think) == nil {
		t.Error("<think> accepted inside a string")
	}
	if m.Accept(qwenEOS[0]) == nil {
		t.Error("EOS accepted before the string is closed")
	}
	quote, _ := tok.TokenID(`"`)
	if err := m.Accept(quote); err != nil {
		t.Fatal(err)
	}
	check("done", true)
	if !m.Done() || m.Accept(qwenEOS[1]) != nil || !m.Ended() || m.Mask(mask, 10) {
		t.Error("EOS not accepted at the end, or a mask after it")
	}
}

// TestUTF8AcrossTokens: a character may be split over tokens, in JSON strings and raw values.
func TestUTF8AcrossTokens(t *testing.T) {
	tok, v := qwen(t)
	// Find a plain token holding only the first two bytes of a 3-byte character.
	part := -1
	for id := range tok.VocabSize() {
		if b := v.bytes[id]; !v.isAdded[id] && len(b) == 2 && b[0] == 0xE4 && b[1] >= 0x80 && b[1] <= 0xBF {
			part = id
			break
		}
	}
	if part < 0 {
		t.Fatal("no split-character token in the vocabulary")
	}
	cont, stray := idOf(v, "\x80"), idOf(v, "a")
	mask := make([]uint64, v.MaskWords())
	for _, g := range []*Grammar{mustSchema(t, `{"type":"string"}`), mustTools(t, ToolsNamed, "Bash")} {
		m, _ := g.NewMatcher(v, 100)
		prefix := `"`
		if len(g.specials) > 0 {
			prefix = "<parameter=command>\n"
		}
		for _, id := range tok.Encode(prefix) {
			if err := m.Accept(id); err != nil {
				t.Fatal(err)
			}
		}
		m.Mask(mask, 100)
		if mask[part>>6]>>(part&63)&1 == 0 {
			t.Fatalf("token %q not allowed", v.bytes[part])
		}
		if err := m.Accept(part); err != nil {
			t.Fatal(err)
		}
		m.Mask(mask, 100)
		has := func(id int) bool { return mask[id>>6]>>(id&63)&1 != 0 }
		if !has(cont) || has(stray) {
			t.Errorf("after a lead: continuation allowed %v, ASCII allowed %v", has(cont), has(stray))
		}
		if m.Accept(stray) == nil {
			t.Error("an ASCII byte accepted inside a character")
		}
		if err := m.Accept(cont); err != nil {
			t.Fatal(err)
		}
	}
	// Byte by byte too.
	accepts(t, mustSchema(t, `{"type":"string","maxLength":2}`), "\"\xe4\xb8\xad\xf0\x9f\x98\x80\"")
	rejects(t, mustSchema(t, `{"type":"string","maxLength":1}`), "\"\xe4\xb8\xad\xf0\x9f\x98\x80\"")
}

// TestTinyBudgets: a budget below the shortest output is refused up front; one just above it
// still ends with a valid output, for every seed.
func TestTinyBudgets(t *testing.T) {
	_, v := qwen(t)
	src := `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string","minLength":3},"c":{"type":"array","items":{"type":"boolean"},"minItems":2},"d":{"enum":["x","yy"]},"e":{"type":"string"}},"required":["a","b","c","d","e"]}`
	g := mustSchema(t, src)
	// One token per byte: the bytes of the shortest output. Qwen's tokens write its keys and
	// literals in fewer.
	if want := len(`{"a":0,"b":"aaa","c":[true,true],"d":"x","e":""}`) + 1; g.MinTokens(byteVocab) != want || g.MinTokens(v) >= want {
		t.Errorf("MinTokens = %d bytes, %d Qwen tokens; want %d bytes and fewer tokens", g.MinTokens(byteVocab), g.MinTokens(v), want)
	}
	var be *BudgetError
	if _, err := g.NewMatcher(v, g.MinTokens(v)-1); !errors.As(err, &be) || be.Need != g.MinTokens(v) {
		t.Errorf("NewMatcher with too small a budget: %v", err)
	}
	if _, err := mustTools(t, ToolsRequired, "").NewMatcher(v, 2); err == nil {
		t.Error("tool calls fit in 2 tokens")
	}
	val := validator(t, src)
	r := rand.New(rand.NewSource(4))
	for extra := range 12 {
		budget := g.MinTokens(v) + extra
		ids, ended := generate(t, g, v, r, budget)
		if !ended || len(ids)+1 > budget {
			t.Fatalf("budget %d: ended %v after %d tokens", budget, ended, len(ids))
		}
		if err := validate(val, decode(v, ids)); err != nil {
			t.Errorf("budget %d: %q: %v", budget, decode(v, ids), err)
		}
	}
	// The budget mechanism bounds an unbounded string: this ends within 5 tokens.
	ids, ended := generate(t, mustSchema(t, `{"type":"string"}`), v, r, 5)
	if !ended || !json.Valid([]byte(decode(v, ids))) {
		t.Errorf("free string in 5 tokens: %q, ended %v", decode(v, ids), ended)
	}
}

// TestDeepNesting: json_object mode refuses to nest past maxFrames and still completes.
func TestDeepNesting(t *testing.T) {
	_, v := qwen(t)
	g := JSONObject()
	m, _ := g.NewMatcher(v, 1000)
	depth := 0
	for _, b := range `{"a":` {
		if m.Accept(idOf(v, string(b))) != nil {
			t.Fatal("prefix refused")
		}
	}
	lb := idOf(v, "[")
	for ; depth < 1000 && m.Accept(lb) == nil; depth++ {
	}
	if depth >= 1000 || depth < 60 {
		t.Fatalf("nesting stopped at %d", depth)
	}
	mask := make([]uint64, v.MaskWords())
	if !m.Mask(mask, 500) || mask[lb>>6]>>(lb&63)&1 != 0 {
		t.Fatal("at the limit: nothing allowed, or '[' still allowed")
	}
	r := rand.New(rand.NewSource(5))
	for left := 500; !m.Ended(); left-- {
		if !m.Mask(mask, left) {
			t.Fatal("stuck")
		}
		m.Accept(pick(v, mask, r))
	}
}

// idOf finds the plain token whose bytes are s.
func idOf(v *Vocab, s string) int {
	for id, b := range v.bytes {
		if string(b) == s && !v.isAdded[id] {
			return id
		}
	}
	panic("no token " + s)
}

func TestCache(t *testing.T) {
	c := NewCache(2)
	a, err := c.JSONSchema(json.RawMessage(`{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"string"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.JSONSchema(json.RawMessage(" {\"properties\": {\"x\": {\"type\": \"integer\"}, \"y\": {\"type\":\"string\"}},\n \"type\": \"object\"}"))
	if a != b {
		t.Error("equivalent schemas compiled twice")
	}
	d, _ := c.JSONSchema(json.RawMessage(`{"type":"object","properties":{"y":{"type":"string"},"x":{"type":"integer"}}}`))
	if d == a {
		t.Error("property order ignored: it decides the output order")
	}
	_, err1 := c.JSONSchema(json.RawMessage(`{"multipleOf":3}`))
	_, err2 := c.JSONSchema(json.RawMessage(`{"multipleOf": 3}`))
	if err1 == nil || err1 != err2 {
		t.Errorf("errors not cached: %v, %v", err1, err2)
	}
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2 (bounded)", c.Len())
	}
	if e, _ := c.JSONSchema(json.RawMessage(`{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"string"}}}`)); e == a {
		t.Error("the least recently used grammar was not evicted")
	}
	t1, _ := c.ToolCalls(claudeTools, ToolsRequired, "")
	t2, _ := c.ToolCalls(claudeTools, ToolsRequired, "")
	t3, _ := c.ToolCalls(claudeTools, ToolsNamed, "Read")
	if t1 == nil || t1 != t2 || t3 == t1 {
		t.Error("tool grammars not cached by tools and mode")
	}
	if _, err := c.JSONSchema(json.RawMessage(`{"type":`)); err == nil {
		t.Error("invalid JSON accepted")
	}
}

func TestConcurrentMatchers(t *testing.T) {
	_, v := qwen(t)
	g := mustSchema(t, acceptanceSchemas[0])
	val := validator(t, acceptanceSchemas[0])
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			r := rand.New(rand.NewSource(int64(100 + i)))
			ids, _ := generate(t, g, v, r, 120)
			errs <- validate(val, decode(v, ids))
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
