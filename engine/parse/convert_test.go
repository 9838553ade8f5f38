package parse

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestConvert(t *testing.T) {
	for _, tt := range []struct {
		raw   string
		types []string
		want  string
	}{
		{"Paris", []string{"string"}, `"Paris"`},
		{"a\n\"b\"\t<&>", nil, `"a\n\"b\"\t<&>"`},
		{"null", []string{"string"}, `"null"`},
		{"null", []string{"string", "null"}, `null`},
		{"None", []string{"null", "string"}, `"None"`},
		{" 42 ", []string{"integer"}, `42`},
		{"123456789012345678901234567890", []string{"integer"}, `123456789012345678901234567890`},
		{"+7", []string{"int"}, `7`},
		{"007", []string{"integer"}, `7`},
		{"5.0", []string{"integer"}, `"5.0"`},
		{"abc", []string{"integer"}, `"abc"`},
		{"null", []string{"integer"}, `null`},
		{"None", []string{"integer", "null"}, `null`},
		{"3", []string{"number"}, `3`},
		{"1.50", []string{"number"}, `1.50`},
		{"1e-7", []string{"number"}, `1e-7`},
		{".5", []string{"float"}, `0.5`},
		{"inf", []string{"number"}, `"inf"`},
		{"NaN", []string{"number"}, `"NaN"`},
		{"TRUE", []string{"boolean"}, `true`},
		{"False", []string{"bool"}, `false`},
		{"yes", []string{"boolean"}, `"yes"`},
		{"{\n  \"a\": [1, {\"b\": null}]\n}", []string{"object"}, `{"a":[1,{"b":null}]}`},
		{`{"html": "<b>&"}`, []string{"object"}, `{"html":"<b>&"}`},
		{"{'a': 1, 'b': True, 'c': None}", []string{"object"}, `{"a": 1, "b": true, "c": null}`},
		{"{'s': 'it\\'s \"x\"\\n', 'u': '\\u00e9\\x41', 't': (1, 2.5, -3e2,), 'e': {}, 'l': []}", []string{"object"},
			`{"s": "it's \"x\"\n", "u": "éA", "t": [1, 2.5, -3e2], "e": {}, "l": []}`},
		{"[1, 'two', False]", []string{"array"}, `[1, "two", false]`},
		{"{1: 2}", []string{"object"}, `"{1: 2}"`},
		{"{'a': 1", []string{"object"}, `"{'a': 1"`},
		{"{'a': foo}", []string{"object"}, `"{'a': foo}"`},
		{"[1] x", []string{"array"}, `"[1] x"`},
		{"not json", []string{"object"}, `"not json"`},
		{"7", []string{"mystery"}, `"7"`},
	} {
		got := convert(tt.raw, tt.types)
		if got != tt.want {
			t.Errorf("convert(%q, %v) = %s, want %s", tt.raw, tt.types, got, tt.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("convert(%q, %v) = %s: invalid JSON", tt.raw, tt.types, got)
		}
	}
}

func TestSchemaTypes(t *testing.T) {
	for _, tt := range []struct {
		schema string
		want   []string
	}{
		{`{"type":"integer"}`, []string{"integer"}},
		{`{"type":["null","number"]}`, []string{"null", "number"}},
		{`{"anyOf":[{"type":"boolean"},{"type":"null"}]}`, []string{"boolean", "null"}},
		{`{"description":"no type"}`, nil},
		{`[]`, nil},
	} {
		if got := schemaTypes(json.RawMessage(tt.schema)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("schemaTypes(%s) = %v, want %v", tt.schema, got, tt.want)
		}
	}
}

func TestToolsFromOpenAI(t *testing.T) {
	tools, err := ToolsFromOpenAI(json.RawMessage(`[
		{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"days":{"type":"integer"}}}}},
		{"type":"function","function":{"name":"noargs"}},
		{"type":"function","name":"flat","parameters":null}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 3 || tools[0].Name != "get_weather" || tools[1].Name != "noargs" || tools[1].Parameters != nil ||
		tools[2].Name != "flat" || tools[2].Parameters != nil {
		t.Fatalf("tools %+v", tools)
	}
	got := Parse("<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>", Options{Tools: tools, NewID: seqIDs()})
	if got.ToolCalls[0].Arguments != `{"days": 3}` {
		t.Errorf("schema from ToolsFromOpenAI not applied: %s", got.ToolCalls[0].Arguments)
	}

	for _, in := range []string{"", "null", " [] "} {
		if tools, err := ToolsFromOpenAI(json.RawMessage(in)); err != nil || len(tools) != 0 {
			t.Errorf("%q: %v %v", in, tools, err)
		}
	}
	for _, tt := range []struct{ in, err string }{
		{`{"type":"function"}`, "tools: must be a JSON array"},
		{`[1,`, "tools: must be a JSON array"},
		{`["x"]`, "tools[0]: must be an object"},
		{`[{"function":{"name":"a"}}]`, `tools[0]: missing "type"`},
		{`[{"type":"web_search"}]`, `tools[0]: unsupported type "web_search"`},
		{`[{"type":"function"}]`, `tools[0]: missing "function"`},
		{`[{"type":"function","function":{"parameters":{}}}]`, "tools[0]: missing function name"},
		{`[{"type":"function","function":{"name":""}}]`, "tools[0]: missing function name"},
		{`[{"type":"function","function":{"name":3}}]`, "tools[0]: json: cannot unmarshal"},
		{`[{"type":"function","function":{"name":"a b"}}]`, `tools[0]: function name "a b" has whitespace`},
		{`[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"a"}}]`, `tools[1]: duplicate function name "a"`},
		{`[{"type":"function","function":{"name":"a","parameters":[]}}]`, "tools[0] (a): parameters must be a JSON object"},
	} {
		_, err := ToolsFromOpenAI(json.RawMessage(tt.in))
		if err == nil || !strings.HasPrefix(err.Error(), tt.err) {
			t.Errorf("%s: error %v, want prefix %q", tt.in, err, tt.err)
		}
	}
}
