package chat

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// caseInput is one case of testdata/chat/cases_input.json. Inputs are read from there, not from
// cases.json, whose Python writer normalized number lexemes (2.50, 1E5) that Go must parse too.
type caseInput struct {
	Name     string                     `json:"name"`
	Template *string                    `json:"template"`
	Messages json.RawMessage            `json:"messages"`
	Tools    json.RawMessage            `json:"tools"`
	AGP      *bool                      `json:"add_generation_prompt"`
	Kwargs   map[string]json.RawMessage `json:"chat_template_kwargs"`
}

type caseResult struct {
	Name     string  `json:"name"`
	Expected *string `json:"expected"`
	Error    *struct {
		Type, Message string
	} `json:"error"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// firstDiff shows where two renders part.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-60)
	return fmt.Sprintf("at byte %d:\n got: %q\nwant: %q", i, got[lo:min(len(got), i+60)], want[lo:min(len(want), i+60)])
}

// TestCasesMatchTransformers renders every reference case and compares it byte for byte with
// what transformers' Jinja2 environment produced (tools/refgen/chat_cases.py).
func TestCasesMatchTransformers(t *testing.T) {
	var in struct{ Cases []caseInput }
	var ref struct {
		Generator struct {
			QwenTemplateSHA256 string `json:"qwen_template_sha256"`
		}
		Cases []caseResult
	}
	readJSON(t, "../../testdata/chat/cases_input.json", &in)
	readJSON(t, "../../testdata/chat/cases.json", &ref)
	if sum := sha256.Sum256([]byte(builtinSource)); hex.EncodeToString(sum[:]) != ref.Generator.QwenTemplateSHA256 {
		t.Fatalf("embedded template differs from the one the references were rendered with")
	}
	if len(in.Cases) != len(ref.Cases) || len(in.Cases) < 30 {
		t.Fatalf("%d input cases, %d references", len(in.Cases), len(ref.Cases))
	}
	for i, c := range in.Cases {
		r := ref.Cases[i]
		if r.Name != c.Name || (r.Expected == nil) == (r.Error == nil) {
			t.Fatalf("case %d: reference %q does not match input %q", i, r.Name, c.Name)
		}
		t.Run(c.Name, func(t *testing.T) {
			tmpl := Builtin()
			if c.Template != nil {
				var err error
				if tmpl, err = Parse(*c.Template); err != nil {
					t.Fatal(err)
				}
			}
			out, err := tmpl.Render(Request{Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: c.AGP == nil || *c.AGP, Kwargs: c.Kwargs})
			var te *TemplateError
			switch {
			case r.Error == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case r.Error == nil && out != *r.Expected:
				t.Fatalf("render differs from transformers %s", firstDiff(out, *r.Expected))
			case r.Error != nil && r.Error.Type == "TemplateError":
				if !errors.As(err, &te) || te.Msg != r.Error.Message {
					t.Fatalf("got %v (%T), want TemplateError %q", err, err, r.Error.Message)
				}
			case r.Error != nil: // a Python runtime error: any ordinary error will do, naming the same kind
				if err == nil || errors.As(err, &te) || !strings.Contains(err.Error(), r.Error.Type) {
					t.Fatalf("got %v, want an ordinary %s error (%s)", err, r.Error.Type, r.Error.Message)
				}
			}
		})
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func render(t *testing.T, tmpl *Template, req Request) string {
	t.Helper()
	if req.Messages == nil {
		req.Messages = json.RawMessage(`[{"role":"user","content":"hi"}]`)
	}
	out, err := tmpl.Render(req)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLoadPrecedence(t *testing.T) {
	list := `{"chat_template": [{"name": "default", "template": "LIST"}, {"name": "tool_use", "template": "TOOLS"}], "eos_token": {"content": "<eos>"}, "bos_token": "<s>"}`
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"jinja file wins", map[string]string{"chat_template.jinja": "FILE", "tokenizer_config.json": `{"chat_template": "CONFIG"}`}, "FILE"},
		{"config string", map[string]string{"tokenizer_config.json": `{"chat_template": "CONFIG {{ bos_token }}"}`}, "CONFIG "},
		{"config list", map[string]string{"tokenizer_config.json": list}, "LIST"},
		{"special tokens", map[string]string{"chat_template.jinja": "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}", "tokenizer_config.json": list}, "<s>|<eos>|False"},
		{"no template in config", map[string]string{"tokenizer_config.json": `{"eos_token": "<|im_end|>"}`}, "<|im_start|>user\nhi<|im_end|>\n"},
		{"empty directory", nil, "<|im_start|>user\nhi<|im_end|>\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := Load(writeFiles(t, tc.files))
			if err != nil {
				t.Fatal(err)
			}
			if got := render(t, tmpl, Request{}); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	tmpl, err := Load(writeFiles(t, map[string]string{"tokenizer_config.json": list}))
	if err != nil {
		t.Fatal(err)
	}
	if got := render(t, tmpl, Request{Tools: json.RawMessage(`[{"name": "f"}]`)}); got != "TOOLS" {
		t.Fatalf("with tools the list's tool_use template should render, got %q", got)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // in the error
	}{
		{"broken jinja file", map[string]string{"chat_template.jinja": "ok\n{% if x %}never closed"}, "chat_template.jinja: chat template: line 2: unexpected end of template, expected 'elif' or 'else' or 'endif'"},
		{"unknown filter", map[string]string{"chat_template.jinja": "{{ x | nosuch }}"}, "no filter named 'nosuch'"},
		{"broken config template", map[string]string{"tokenizer_config.json": `{"chat_template": "{{ x "}`}, "tokenizer_config.json: chat template: line 1: unexpected end of template"},
		{"invalid config json", map[string]string{"tokenizer_config.json": `{"chat_template": `}, "tokenizer_config.json: unexpected end of JSON input"},
		{"list without default", map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "tool_use", "template": "x"}]}`}, `no "default" template`},
		{"wrong type", map[string]string{"tokenizer_config.json": `{"chat_template": 7}`}, "neither a string nor a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFiles(t, tc.files))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing directory must be an error, not the builtin template")
	}
}

func TestToolCallArgumentsDecoded(t *testing.T) {
	tmpl, err := Parse(`{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.arguments is mapping }}{% if c.function.arguments is mapping %}{% for k, v in c.function.arguments|items %} {{ k }}={{ v|tojson }}{% endfor %}{% endif %};{% endfor %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	msgs := `[{"role": "assistant", "tool_calls": [
		{"function": {"name": "a", "arguments": "{\"z\": 1.50, \"a\": [1E2, 12345678901234567890123], \"s\": \"\\u2028<&>\"}"}},
		{"function": {"name": "b", "arguments": ""}},
		{"function": {"name": "c", "arguments": null}},
		{"function": {"name": "d", "arguments": {"kept": true}}}]},
		{"role": "user", "tool_calls": [{"function": {"arguments": "{\"x\": 1}"}}]}]`
	got := render(t, tmpl, Request{Messages: json.RawMessage(msgs)})
	want := "True z=1.5 a=[100.0, 12345678901234567890123] s=\"\u2028<&>\";True;True;True kept=true;False;"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	_, err = tmpl.Render(Request{Messages: json.RawMessage(`[{"role": "assistant", "tool_calls": [{"function": {"arguments": "{not json"}}]}]`)})
	if err == nil || !strings.Contains(err.Error(), "messages[0].tool_calls[0].function.arguments is not valid JSON") {
		t.Fatalf("got %v", err)
	}
}

func TestRaiseExceptionIsTemplateError(t *testing.T) {
	_, err := Builtin().Render(Request{Messages: json.RawMessage(`[{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]`)})
	var te *TemplateError
	if !errors.As(err, &te) || te.Error() != "System message must be at the beginning." {
		t.Fatalf("got %v (%T)", err, err)
	}
	// Other failures are not TemplateErrors.
	tmpl, _ := Parse("{{ messages[0].content + 1 }}")
	if _, err := tmpl.Render(Request{Messages: json.RawMessage(`[{"content": "x"}]`)}); err == nil || errors.As(err, &te) {
		t.Fatalf("a type error must be an ordinary error, got %v (%T)", err, err)
	}
	if _, err := Builtin().Render(Request{Messages: json.RawMessage(`{"role": "user"}`)}); err == nil || errors.As(err, &te) {
		t.Fatalf("messages that are not an array must be an ordinary error, got %v", err)
	}
}

func TestKwargsPassThrough(t *testing.T) {
	tmpl, _ := Parse("{{ custom.b }}{{ custom.a|tojson }}|{{ add_generation_prompt }}|{{ messages|length }}")
	got := render(t, tmpl, Request{AddGenerationPrompt: true, Kwargs: map[string]json.RawMessage{
		"custom":                json.RawMessage(`{"b": 1.0, "a": [1e400, -0]}`),
		"add_generation_prompt": json.RawMessage(`false`), // wins over the request field (vLLM's rule)
	}})
	if want := "1.0[Infinity, 0]|False|1"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
