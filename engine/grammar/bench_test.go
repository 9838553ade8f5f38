package grammar

import (
	"encoding/json"
	"strings"
	"testing"
)

// benchStates are grammar states to mask in, each reached by accepting a text's tokens.
var benchStates = []struct {
	name, schema, text string
	tools              ToolMode
}{
	{"object-start", acceptanceSchemas[7], `{`, -1},
	{"object-key", acceptanceSchemas[7], `{"command":"ls","`, -1},
	{"long-string", acceptanceSchemas[7], `{"command":"for f in *.go; do echo $f; grep -n func $f | head -3; done && echo finished with all of the files in this directory`, -1},
	{"string-maxLength", `{"type":"object","properties":{"s":{"type":"string","maxLength":40}}}`, `{"s":"twenty characters..`, -1},
	{"pattern-string", `{"type":"string","pattern":"^[a-z_]+[0-9]*$"}`, `"snake_case_name`, -1},
	{"pattern-maxLength-uncached", `{"type":"string","pattern":"^[a-z_ ]+$","maxLength":300}`, `"` + strings.Repeat("snake case name ", 5), -1},
	{"number", acceptanceSchemas[2], `{"age":12`, -1},
	{"value-start", acceptanceSchemas[5], `{"value":`, -1},
	{"json-object-value", "", `{"k": [1, {"a": `, -1},
	{"tool-param-value", "", "<tool_call>\n<function=Bash>\n<parameter=command>\nfor f in *.go; do echo $f", ToolsRequired},
	{"tool-param-name", "", "<tool_call>\n<function=Edit>\n<parameter=file_path>\n/tmp/x\n</parameter>\n", ToolsRequired},
	{"tool-after-call", "", "<tool_call>\n<function=get_time>\n</function>\n</tool_call>", ToolsRequired},
}

func benchMatcher(tb testing.TB, i int) *Matcher {
	tok, v := qwen(tb)
	c := benchStates[i]
	var g *Grammar
	var err error
	switch {
	case c.tools >= 0:
		g, err = ToolCalls(claudeTools, c.tools, "")
	case c.schema == "":
		g = JSONObject()
	default:
		g, err = CompileJSONSchema(json.RawMessage(c.schema))
	}
	if err != nil {
		tb.Fatal(err)
	}
	m, err := g.NewMatcher(v, 4096)
	if err != nil {
		tb.Fatal(err)
	}
	for _, id := range tok.Encode(c.text) {
		if err := m.Accept(id); err != nil {
			tb.Fatalf("%s: %v", c.name, err)
		}
	}
	return m
}

// BenchmarkMask measures one mask over the real vocabulary (151,669 ids) in typical states, with
// an ample budget and, for /tight, a budget that forces the exact check of every token.
func BenchmarkMask(b *testing.B) {
	_, v := qwen(b)
	mask := make([]uint64, v.MaskWords())
	for i, c := range benchStates {
		b.Run(c.name, func(b *testing.B) {
			m := benchMatcher(b, i)
			if strings.HasSuffix(c.name, "-uncached") {
				n := &m.g.nodes[m.stk[len(m.stk)-1].n]
				v.leafCacheOf(n.dfa, n.tdist != nil).n = maxCached
			}
			m.Mask(mask, 4096) // fill the caches
			for b.Loop() {
				m.Mask(mask, 4096)
			}
		})
	}
	b.Run("long-string/tight", func(b *testing.B) {
		m := benchMatcher(b, 2)
		budget := m.MinTokens() + 2
		m.Mask(mask, budget)
		for b.Loop() {
			m.Mask(mask, budget)
		}
	})
}

// BenchmarkAccept measures advancing by one token inside a string.
func BenchmarkAccept(b *testing.B) {
	tok, _ := qwen(b)
	id := tok.Encode(" word")[0]
	m := benchMatcher(b, 2)
	for b.Loop() {
		saved := append([]frame(nil), m.stk...)
		m.Accept(id)
		m.stk = saved
	}
}

// BenchmarkCompile measures compiling the acceptance schemas and the tool-call grammar.
func BenchmarkCompile(b *testing.B) {
	b.Run("schemas", func(b *testing.B) {
		for b.Loop() {
			for _, s := range acceptanceSchemas {
				if _, err := CompileJSONSchema(json.RawMessage(s)); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("tools", func(b *testing.B) {
		for b.Loop() {
			if _, err := ToolCalls(claudeTools, ToolsRequired, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLeafCacheFill measures the one-time work of a wide leaf state's mask cache.
func BenchmarkLeafCacheFill(b *testing.B) {
	_, v := qwen(b)
	jsonStr, _, _ := free()
	for b.Loop() {
		v.buildLeafEntry(jsonStr, 1, v.wideTokenDist(jsonStr, new(int)))
	}
}
