package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeRenderFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRenderMatchesReference runs reference cases through `lily render` and expects the
// transformers output byte for byte, with nothing appended.
func TestRenderMatchesReference(t *testing.T) {
	var ref struct {
		Cases []struct {
			Name     string                     `json:"name"`
			Template *string                    `json:"template"`
			Messages json.RawMessage            `json:"messages"`
			Tools    json.RawMessage            `json:"tools"`
			AGP      *bool                      `json:"add_generation_prompt"`
			Kwargs   map[string]json.RawMessage `json:"chat_template_kwargs"`
			Expected *string                    `json:"expected"`
		}
	}
	raw, err := os.ReadFile("../../testdata/chat/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	want := map[string]bool{"thinking_false": true, "no_generation_prompt": true, "parallel_calls_mixed_argument_types": true}
	for _, c := range ref.Cases {
		if !want[c.Name] || c.Template != nil || c.Expected == nil {
			continue
		}
		delete(want, c.Name)
		req, _ := json.Marshal(map[string]any{"messages": c.Messages, "tools": c.Tools, "chat_template_kwargs": c.Kwargs, "add_generation_prompt": c.AGP})
		out, err := execute(t, "render", "--request", writeRenderFile(t, dir, c.Name+".json", string(req)))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if out != *c.Expected {
			t.Fatalf("%s: got %q\nwant %q", c.Name, out, *c.Expected)
		}
	}
	if len(want) > 0 {
		t.Fatalf("reference cases not found: %v", want)
	}
}

func TestRenderTemplateFileAndDirectory(t *testing.T) {
	dir := t.TempDir()
	req := writeRenderFile(t, dir, "req.json", `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"n": 1.0}], "chat_template_kwargs": {"x": 12345678901234567890}}`)
	tmpl := writeRenderFile(t, dir, "t.jinja", "{{ messages[0].content }}|{{ tools|tojson }}|{{ x }}|{{ add_generation_prompt }}\n")
	out, err := execute(t, "render", "--template", tmpl, "--request", req)
	if err != nil {
		t.Fatal(err)
	}
	if want := `hi|[{"n": 1.0}]|12345678901234567890|True`; out != want {
		t.Fatalf("got %q, want %q", out, want)
	}
	ckpt := filepath.Join(dir, "ckpt")
	if err := os.Mkdir(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRenderFile(t, ckpt, "tokenizer_config.json", `{"chat_template": "{{ eos_token }}{{ add_generation_prompt }}", "eos_token": "<|im_end|>"}`)
	req = writeRenderFile(t, dir, "req2.json", `{"messages": [], "add_generation_prompt": false}`)
	if out, err = execute(t, "render", "--template", ckpt, "--request", req); err != nil || out != "<|im_end|>False" {
		t.Fatalf("got %q, %v", out, err)
	}
}

func TestRenderErrors(t *testing.T) {
	dir := t.TempDir()
	out, err := execute(t, "render", "--request", writeRenderFile(t, dir, "empty.json", `{"messages": []}`))
	if err == nil || err.Error() != "No messages provided." || out != "" {
		t.Fatalf("template error: got %v, output %q", err, out)
	}
	broken := writeRenderFile(t, dir, "broken.jinja", "{% for %}")
	if _, err := execute(t, "render", "--template", broken, "--request", filepath.Join(dir, "empty.json")); err == nil || !strings.Contains(err.Error(), "broken.jinja") {
		t.Fatalf("broken template: got %v", err)
	}
	if _, err := execute(t, "render", "--request", writeRenderFile(t, dir, "bad.json", `{"messages": [`)); err == nil {
		t.Fatal("invalid request JSON must fail")
	}
}

// TestRenderNormalises: lily render renders as the server does: chat_template_kwargs'
// add_generation_prompt false is honoured, developer is system, a trailing system message is
// folded into the last user message, and a final assistant message is continued.
func TestRenderNormalises(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ req, want string }{
		"kwargs add_generation_prompt false": {`{"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": {"add_generation_prompt": false}}`,
			"<|im_start|>user\nHi<|im_end|>\n"},
		"developer and a trailing system": {`{"messages": [{"role": "developer", "content": "D"}, {"role": "user", "content": "Hi"}, {"role": "system", "content": "Late"}], "chat_template_kwargs": {"enable_thinking": false}}`,
			"<|im_start|>system\nD<|im_end|>\n<|im_start|>user\nHi\n\nLate<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
		"assistant prefill": {`{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure:"}]}`,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nSure:"},
	} {
		out, err := execute(t, "render", "--request", writeRenderFile(t, dir, "req.json", tc.req))
		if err != nil || out != tc.want {
			t.Errorf("%s: got %q (%v), want %q", name, out, err, tc.want)
		}
	}
}
