package grammar

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/parse"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// validator compiles schema with an independent JSON Schema implementation (formats asserted).
func validator(tb testing.TB, schema string) *jsonschema.Schema {
	tb.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		tb.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("mem://schema.json", doc); err != nil {
		tb.Fatal(err)
	}
	s, err := c.Compile("mem://schema.json")
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func validate(s *jsonschema.Schema, text string) error {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if !json.Valid([]byte(text)) {
		return fmt.Errorf("encoding/json rejects it")
	}
	return s.Validate(inst)
}

// acceptanceSchemas are ten schemas of the kinds clients send.
var acceptanceSchemas = []string{
	// nested objects and arrays
	`{"type":"object","properties":{"name":{"type":"string"},"address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"},"geo":{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":2}},"required":["street","zip","geo"]},"tags":{"type":"array","items":{"type":"string","maxLength":12}}},"required":["name","address","tags"]}`,
	// enums
	`{"type":"object","properties":{"status":{"enum":["open","closed","in_progress"]},"priority":{"type":"integer","enum":[1,2,3,10]},"label":{"enum":["a",null,true,{"k":"v"}]}},"required":["status","priority","label"],"additionalProperties":false}`,
	// integers with bounds
	`{"type":"object","properties":{"age":{"type":"integer","minimum":0,"maximum":120},"delta":{"type":"integer","exclusiveMinimum":-10,"exclusiveMaximum":10},"big":{"type":"integer","minimum":1000},"neg":{"type":"integer","maximum":-3}},"required":["age","delta","big","neg"]}`,
	// strings with length limits, patterns and formats
	`{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{3}-\\d{2,4}$"},"name":{"type":"string","minLength":1,"maxLength":20},"day":{"type":"string","format":"date"},"at":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"},"mail":{"type":"string","format":"email"}},"required":["code","name","day","at","id","mail"]}`,
	// optional properties
	`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"},"c":{"type":"boolean"},"d":{"type":"null"},"e":{"type":"array","items":{"type":"integer"}},"f":{"type":"string","maxLength":5}},"required":["d"]}`,
	// anyOf of types, type lists
	`{"type":"object","properties":{"value":{"anyOf":[{"type":"string","maxLength":8},{"type":"integer","minimum":0},{"type":"null"},{"type":"array","items":{"type":"number","minimum":-1,"maximum":1}}]},"maybe":{"type":["string","null"]}},"required":["value","maybe"]}`,
	// $ref and recursion
	`{"$defs":{"node":{"type":"object","properties":{"name":{"type":"string","maxLength":10},"children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":3}},"required":["name","children"]}},"type":"object","properties":{"root":{"$ref":"#/$defs/node"}},"required":["root"]}`,
	// a Claude-Code-like tool input schema
	`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"command":{"type":"string","description":"The command to execute"},"timeout":{"type":"number","description":"Optional timeout in milliseconds (max 600000)","maximum":600000},"description":{"type":"string","description":"Clear, concise description"},"run_in_background":{"type":"boolean"}},"required":["command"],"additionalProperties":false}`,
	// unicode text
	`{"type":"object","properties":{"greeting":{"const":"héllo wörld 你好 😀"},"text":{"type":"string","minLength":3,"maxLength":30},"emoji":{"enum":["😀","🎉","中文","naïve"]},"lang":{"type":"string","pattern":"^[а-я]+$"}},"required":["greeting","text","emoji","lang"]}`,
	// arrays of objects, tuples, oneOf, exclusive number bounds
	`{"type":"object","properties":{"points":{"type":"array","items":{"type":"object","properties":{"x":{"type":"number","minimum":0,"maximum":1},"y":{"type":"number","exclusiveMinimum":-5}},"required":["x","y"]},"minItems":1,"maxItems":4},"pair":{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":2},"either":{"oneOf":[{"type":"string"},{"type":"array","items":{"type":"string"}}]}},"required":["points","pair","either"]}`,
}

// TestAcceptanceJSONSchema: 100 generations with random logits over the real vocabulary, each
// ending with an EOS within its budget and validating against its schema.
func TestAcceptanceJSONSchema(t *testing.T) {
	_, v := qwen(t)
	r := rand.New(rand.NewSource(1))
	valid := 0
	for i := range 100 {
		src := acceptanceSchemas[i%len(acceptanceSchemas)]
		g := mustSchema(t, src)
		budget := 200
		if i%5 == 4 {
			budget = g.MinTokens(v) + r.Intn(20) // tight budgets too
		}
		ids, ended := generate(t, g, v, r, budget)
		text := decode(v, ids)
		if !ended {
			t.Errorf("schema %d: no EOS within %d tokens: %q", i%10, budget, text)
			continue
		}
		if err := validate(validator(t, src), text); err != nil {
			t.Errorf("schema %d: %q: %v", i%10, text, err)
			continue
		}
		valid++
		if testing.Verbose() && i < 10 {
			t.Logf("schema %d (%d tokens): %s", i%10, len(ids), text)
		}
	}
	t.Logf("%d/100 outputs valid", valid)
}

// claudeTools are tool schemas like Claude Code's.
var claudeTools = []Tool{
	{Name: "Bash", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"number","maximum":600000},"description":{"type":"string"},"run_in_background":{"type":"boolean"}},"required":["command"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}`)},
	{Name: "Read", Parameters: json.RawMessage(`{"type":"object","properties":{"file_path":{"type":"string"},"offset":{"type":"integer","minimum":0},"limit":{"type":"integer","exclusiveMinimum":0}},"required":["file_path"]}`)},
	{Name: "Edit", Parameters: json.RawMessage(`{"type":"object","properties":{"file_path":{"type":"string"},"old_string":{"type":"string"},"new_string":{"type":"string"},"replace_all":{"type":"boolean","default":false}},"required":["file_path","old_string","new_string"]}`)},
	{Name: "TodoWrite", Parameters: json.RawMessage(`{"type":"object","properties":{"todos":{"type":"array","items":{"type":"object","properties":{"content":{"type":"string","minLength":1},"status":{"type":"string","enum":["pending","in_progress","completed"]},"id":{"type":"string"}},"required":["content","status","id"],"additionalProperties":false}}},"required":["todos"]}`)},
	{Name: "WebFetch", Parameters: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string","format":"uri"},"prompt":{"type":"string"}},"required":["url","prompt"]}`)},
	{Name: "get_time", Parameters: nil},
	{Name: "set_level", Parameters: json.RawMessage(`{"type":"object","properties":{"level":{"type":["integer","null"],"minimum":1,"maximum":5},"mode":{"type":"string","enum":["fast","slow"]},"ratio":{"anyOf":[{"type":"number"},{"type":"null"}]}},"required":["level","mode"]}`)},
}

func parseTools() []parse.Tool {
	var out []parse.Tool
	for _, t := range claudeTools {
		out = append(out, parse.Tool{Name: t.Name, Parameters: t.Parameters})
	}
	return out
}

// checkCalls parses text as engine/parse does and validates every call's arguments.
func checkCalls(t *testing.T, text string, want string) error {
	res := parse.Parse(text, parse.Options{Tools: parseTools()})
	if len(res.ToolCalls) == 0 {
		return fmt.Errorf("no tool call parsed")
	}
	if strings.TrimSpace(res.Content) != "" {
		return fmt.Errorf("content %q besides the calls", res.Content)
	}
	for _, c := range res.ToolCalls {
		var tool *Tool
		for i := range claudeTools {
			if claudeTools[i].Name == c.Name {
				tool = &claudeTools[i]
			}
		}
		if tool == nil || want != "" && c.Name != want {
			return fmt.Errorf("call of %q", c.Name)
		}
		params := string(tool.Parameters)
		if params == "" {
			params = `{"type":"object","additionalProperties":false}`
		}
		if err := validate(validator(t, params), c.Arguments); err != nil {
			return fmt.Errorf("%s(%s): %v", c.Name, c.Arguments, err)
		}
	}
	return nil
}

// TestAcceptanceToolCalls: 50 generations in Required mode and 50 in Named mode with random
// logits, each parsed by engine/parse and every call's arguments validated.
func TestAcceptanceToolCalls(t *testing.T) {
	_, v := qwen(t)
	r := rand.New(rand.NewSource(2))
	required, err := ToolCalls(claudeTools, ToolsRequired, "")
	if err != nil {
		t.Fatal(err)
	}
	valid := 0
	for i := range 100 {
		g, name, prefix := required, "", ""
		if i%2 == 1 {
			name = claudeTools[r.Intn(len(claudeTools))].Name
			if g, err = ToolCalls(claudeTools, ToolsNamed, name); err != nil {
				t.Fatal(err)
			}
			prefix = "<tool_call>\n<function=" + name + ">\n"
		}
		budget := 200
		if i%5 == 4 {
			budget = g.MinTokens(v) + r.Intn(20)
		}
		ids, ended := generate(t, g, v, r, budget)
		text := prefix + decode(v, ids)
		if !ended {
			t.Errorf("no EOS within %d tokens: %q", budget, text)
			continue
		}
		if err := checkCalls(t, text, name); err != nil {
			t.Errorf("%q: %v", text, err)
			continue
		}
		valid++
		if testing.Verbose() && i < 6 {
			t.Logf("(%d tokens) %q", len(ids), text)
		}
	}
	t.Logf("%d/100 tool-call outputs valid", valid)
}
