// Package chat renders chat prompts with the checkpoint's Jinja chat template, byte-identical to transformers.
//
// Templates run on a built-in Jinja2 interpreter (internal/jinja) that reproduces
// transformers' environment: ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True, extensions=[loopcontrols]) with raise_exception, strftime_now and a
// tojson that is json.dumps(x, ensure_ascii=False) — Python values, key order and number
// lexemes included.
package chat

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/lilyformac/lily/engine/chat/internal/jinja"
)

// builtinSource is the official Qwen/Qwen3.6-35B-A3B chat_template.jinja, byte for byte.
//
//go:embed qwen3_6_chat_template.jinja
var builtinSource string

// Template is a parsed chat template; it is safe for concurrent use.
type Template struct {
	main, toolUse *jinja.Template // toolUse: the named "tool_use" template, used when tools are given
	vars          map[string]any  // special tokens from tokenizer_config.json, as transformers passes them
}

// Request is one render. Messages and Tools stay raw JSON so that key order and number
// lexemes reach the template as Python's json.loads would give them.
type Request struct {
	Messages            json.RawMessage            // array of OpenAI-style messages
	Tools               json.RawMessage            // array of tool schemas; empty or null means none
	AddGenerationPrompt bool                       // chat_template_kwargs' add_generation_prompt, if given, wins (vLLM's rule)
	Kwargs              map[string]json.RawMessage // chat_template_kwargs: enable_thinking, preserve_thinking, ...
	// ContinueFinal leaves the final assistant message open, the prompt ending right after its
	// content, for the model to continue (ResolveEnding; needs AddGenerationPrompt false).
	ContinueFinal bool
}

// TemplateError is an error the template raised with raise_exception(msg): the request is
// one the template rejects (a server answers it with HTTP 400).
type TemplateError struct{ Msg string }

func (e *TemplateError) Error() string { return e.Msg }

// InputError is a request the renderer cannot read (bad JSON in messages, tools, kwargs or
// tool-call arguments): a client error, like TemplateError.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Parse parses a template source.
func Parse(src string) (*Template, error) {
	t, err := jinja.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &Template{main: t}, nil
}

var builtin = sync.OnceValue(func() *Template {
	t, err := Parse(builtinSource)
	if err != nil {
		panic(err) // the embedded file is fixed and covered by tests
	}
	return t
})

// BuiltinSource is the official Qwen3.6 template text built into Lily.
func BuiltinSource() string { return builtinSource }

// Builtin returns the official Qwen3.6 template.
func Builtin() *Template { return builtin() }

// Load returns the template a checkpoint directory ships, as transformers finds it:
// chat_template.jinja, else tokenizer_config.json's chat_template (a string, or a list of
// {name, template} whose "default" entry is used and whose "tool_use" entry serves requests
// with tools), else the built-in Qwen3.6 template.
func Load(dir string) (*Template, error) {
	if fi, err := os.Stat(dir); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	cfg, err := readTokenizerConfig(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	var t *Template
	path := filepath.Join(dir, "chat_template.jinja")
	src, err := os.ReadFile(path)
	switch {
	case err == nil:
		if t, err = Parse(string(src)); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	default:
		if t, err = cfg.template(); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "tokenizer_config.json"), err)
		}
	}
	if t == nil {
		t = &Template{main: Builtin().main}
	}
	t.vars = cfg.specialTokens()
	return t, nil
}

type tokenizerConfig map[string]json.RawMessage

func readTokenizerConfig(path string) (tokenizerConfig, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cfg tokenizerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// template parses chat_template; nil when the config has none.
func (c tokenizerConfig) template() (*Template, error) {
	raw, ok := c["chat_template"]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var src string
	if json.Unmarshal(raw, &src) == nil {
		return Parse(src)
	}
	var named []struct{ Name, Template string }
	if err := json.Unmarshal(raw, &named); err != nil {
		return nil, errors.New("chat_template is neither a string nor a list of named templates")
	}
	var t Template
	for _, n := range named {
		p, err := Parse(n.Template)
		if err != nil {
			return nil, fmt.Errorf("chat template %q: %w", n.Name, err)
		}
		switch n.Name {
		case "default":
			t.main = p.main
		case "tool_use":
			t.toolUse = p.main
		}
	}
	if t.main == nil {
		return nil, errors.New(`chat_template list has no "default" template`)
	}
	return &t, nil
}

// specialTokens are the string special tokens transformers passes to every render.
func (c tokenizerConfig) specialTokens() map[string]any {
	vars := map[string]any{}
	for _, k := range []string{"bos_token", "eos_token", "unk_token", "pad_token"} {
		var tok struct{ Content string }
		var s string
		switch {
		case json.Unmarshal(c[k], &s) == nil:
			vars[k] = s
		case json.Unmarshal(c[k], &tok) == nil && tok.Content != "":
			vars[k] = tok.Content
		}
	}
	return vars
}

// Render renders req. An error from the template's raise_exception is a *TemplateError.
func (t *Template) Render(req Request) (string, error) {
	messages, err := decode("messages", req.Messages, []any{})
	if err != nil {
		return "", &InputError{err}
	}
	list, ok := messages.([]any)
	if !ok {
		return "", &InputError{errors.New("chat: messages must be a JSON array")}
	}
	if err := normalizeMessages(list); err != nil {
		return "", &InputError{err}
	}
	tools, err := decode("tools", req.Tools, nil)
	if err != nil {
		return "", &InputError{err}
	}
	vars := make(map[string]any, len(t.vars)+len(req.Kwargs)+4)
	for k, v := range t.vars {
		vars[k] = v
	}
	for k, raw := range req.Kwargs {
		if vars[k], err = decode("chat_template_kwargs."+k, raw, nil); err != nil {
			return "", &InputError{err}
		}
	}
	vars["messages"], vars["tools"], vars["documents"] = list, tools, nil
	if _, given := req.Kwargs["add_generation_prompt"]; !given {
		vars["add_generation_prompt"] = req.AddGenerationPrompt
	}
	tmpl := t.main
	if tools != nil && t.toolUse != nil {
		tmpl = t.toolUse
	}
	out, err := tmpl.Render(vars)
	var raised *jinja.RaiseError
	if errors.As(err, &raised) {
		return "", &TemplateError{raised.Msg}
	}
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	if req.ContinueFinal {
		if add, _ := vars["add_generation_prompt"].(bool); add {
			return "", &InputError{errors.New("continue_final_message and add_generation_prompt cannot both be true")}
		}
		return continueFinal(out)
	}
	return out, nil
}

// decode turns raw JSON into template values; empty input or null gives def.
func decode(what string, raw json.RawMessage, def any) (any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	v, err := jinja.FromJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %w", what, err)
	}
	return v, nil
}

// normalizeMessages applies what vLLM does before rendering: an assistant's reasoning alias
// becomes reasoning_content, and OpenAI's JSON-string tool-call arguments become mappings
// (empty or null arguments become {}), since templates iterate them with |items.
func normalizeMessages(messages []any) error {
	for i, m := range messages {
		msg, ok := m.(*jinja.Dict)
		if role, _ := get(msg, "role"); !ok || role != "assistant" {
			continue
		}
		if r, ok := msg.Get("reasoning"); ok {
			if _, has := msg.Get("reasoning_content"); !has {
				msg.Set("reasoning_content", r)
			}
		}
		calls, _ := get(msg, "tool_calls")
		list, _ := calls.([]any)
		for j, c := range list {
			call, _ := c.(*jinja.Dict)
			fn, ok := get(call, "function")
			fnd, isDict := fn.(*jinja.Dict)
			if !ok || !isDict {
				continue
			}
			switch args, _ := fnd.Get("arguments"); a := args.(type) {
			case nil:
				fnd.Set("arguments", jinja.NewDict())
			case string:
				if a == "" {
					fnd.Set("arguments", jinja.NewDict())
					continue
				}
				v, err := jinja.FromJSON([]byte(a))
				if err != nil {
					return fmt.Errorf("chat: messages[%d].tool_calls[%d].function.arguments is not valid JSON: %w", i, j, err)
				}
				fnd.Set("arguments", v)
			}
		}
	}
	return nil
}

func get(d *jinja.Dict, k string) (any, bool) {
	if d == nil {
		return nil, false
	}
	return d.Get(k)
}
