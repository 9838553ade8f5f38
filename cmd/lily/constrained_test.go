package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// constrainedSchemas are ten response formats of the kinds clients send: nested objects and
// arrays, enums, bounded integers, strings with lengths and patterns, optional properties, a
// union of types, a $ref, an agent's tool schema, unicode text.
var constrainedSchemas = []string{
	`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`,
	`{"type":"object","properties":{"user":{"type":"object","properties":{"id":{"type":"integer","minimum":1},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},"required":["id","tags"]}},"required":["user"]}`,
	`{"type":"object","properties":{"mood":{"enum":["happy","sad","neutral"]},"score":{"type":"number"}},"required":["mood"]}`,
	`{"type":"object","properties":{"year":{"type":"integer","minimum":1900,"maximum":2100},"month":{"type":"integer","minimum":1,"maximum":12}},"required":["year","month"]}`,
	`{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{2,4}$"},"note":{"type":"string","minLength":2,"maxLength":12}},"required":["code","note"]}`,
	`{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"c":{"type":"string"}},"required":["c"]}`,
	`{"type":"object","properties":{"value":{"anyOf":[{"type":"integer"},{"type":"string","maxLength":5},{"type":"boolean"}]}},"required":["value"]}`,
	`{"$defs":{"point":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"]}},"type":"object","properties":{"from":{"$ref":"#/$defs/point"},"to":{"$ref":"#/$defs/point"}},"required":["from","to"]}`,
	`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"command":{"type":"string","description":"The command to execute"},"timeout":{"type":"number","description":"Optional timeout in milliseconds","maximum":600000},"description":{"type":"string"}},"required":["command"],"additionalProperties":false}`,
	`{"type":"object","properties":{"greeting":{"type":"string","minLength":1,"maxLength":20},"lang":{"enum":["日本語","français","English"]}},"required":["greeting","lang"]}`,
}

// TestConstrainedOutputsValidate: with the demo model's random weights, every answer under a
// response format validates against its schema — 100 of 100, sampled, thinking on for half (the
// reasoning is then cut in time for the answer) — and every forced tool call comes back as
// tool_calls with arguments valid for the tool's schema. Ollama's format and Responses'
// text.format reach the same grammar.
func TestConstrainedOutputsValidate(t *testing.T) {
	base := serveDemo(t, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	valid := 0
	for i, schema := range constrainedSchemas {
		sch := compileSchema(t, schema)
		for j := range 10 {
			thinking := j%2 == 1
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"Answer in JSON, case %d."}],"max_tokens":96,"temperature":1,"seed":%d,"chat_template_kwargs":{"enable_thinking":%v},"response_format":{"type":"json_schema","json_schema":{"name":"s","strict":true,"schema":%s}}}`, j, 100*i+j, thinking, schema)
			var r struct {
				Choices []struct {
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
				} `json:"choices"`
			}
			postJSON(t, ctx, base+"/v1/chat/completions", body, &r)
			var v any
			if err := json.Unmarshal([]byte(r.Choices[0].Message.Content), &v); err != nil {
				t.Errorf("schema %d, case %d: not JSON: %q", i, j, r.Choices[0].Message.Content)
				continue
			}
			if err := sch.Validate(v); err != nil {
				t.Errorf("schema %d, case %d: %q: %v", i, j, r.Choices[0].Message.Content, err)
				continue
			}
			valid++
		}
	}
	t.Logf("%d of 100 constrained answers valid", valid)

	tools := `[{"type":"function","function":{"name":"Bash","description":"Run a command","parameters":` + constrainedSchemas[8] + `}},{"type":"function","function":{"name":"Move","parameters":` + constrainedSchemas[1] + `}}]`
	for j := range 10 {
		choice := `"required"`
		if j%2 == 1 {
			choice = `{"type":"function","function":{"name":"Move"}}`
		}
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"Do it, %d."}],"max_tokens":128,"temperature":1,"seed":%d,"tools":%s,"tool_choice":%s}`, j, j, tools, choice)
		var r struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
				Message      struct {
					ToolCalls []struct {
						Function struct{ Name, Arguments string } `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		postJSON(t, ctx, base+"/v1/chat/completions", body, &r)
		calls := r.Choices[0].Message.ToolCalls
		if r.Choices[0].FinishReason != "tool_calls" || len(calls) == 0 {
			t.Errorf("forced call %d: finish %q, %d calls", j, r.Choices[0].FinishReason, len(calls))
			continue
		}
		for _, c := range calls {
			schema := map[string]string{"Bash": constrainedSchemas[8], "Move": constrainedSchemas[1]}[c.Function.Name]
			var args any
			if schema == "" || json.Unmarshal([]byte(c.Function.Arguments), &args) != nil || compileSchema(t, schema).Validate(args) != nil {
				t.Errorf("forced call %d: %s(%s) is not valid for its schema", j, c.Function.Name, c.Function.Arguments)
			}
		}
	}

	// Ollama's format and Responses' text.format go through the same grammar.
	var o struct {
		Message struct{ Content string } `json:"message"`
	}
	postJSON(t, ctx, base+"/api/chat", `{"stream":false,"think":false,"options":{"num_predict":64},"format":`+constrainedSchemas[0]+`,"messages":[{"role":"user","content":"x"}]}`, &o)
	var ov any
	if json.Unmarshal([]byte(o.Message.Content), &ov) != nil || compileSchema(t, constrainedSchemas[0]).Validate(ov) != nil {
		t.Errorf("ollama format: %q", o.Message.Content)
	}
	var rr struct {
		Output []struct {
			Type    string
			Content []struct{ Text string }
		}
	}
	postJSON(t, ctx, base+"/v1/responses", `{"input":"x","max_output_tokens":64,"reasoning":{"effort":"none"},"text":{"format":{"type":"json_object"}}}`, &rr)
	var text string
	for _, item := range rr.Output {
		if item.Type == "message" {
			text = item.Content[0].Text
		}
	}
	if err := json.Unmarshal([]byte(text), new(map[string]any)); err != nil {
		t.Errorf("responses json_object: %q", text)
	}
}

func compileSchema(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func postJSON(t *testing.T, ctx context.Context, url, body string, out any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: %v: %s", url, err, raw)
	}
}
