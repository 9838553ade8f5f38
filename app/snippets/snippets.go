// Package snippets writes the ready-to-paste setups of the menu's "Use with…" submenu: how to
// point Claude Code, Codex CLI, opencode and Qwen Code (through `lily launch`, or by their
// environment variables), Cline/Roo Code, Continue, Zed, Open WebUI, Python and curl at Lily's
// base URL, model id and (when one is set) API key variable.
//
// A shell setup (Kind Shell) is one block that does one thing when pasted into macOS's stock
// zsh or into bash: no comment lines (zsh without interactivecomments runs `#` as a command),
// nothing that history expansion or globbing could change, and the client started once. What
// a reader should know about it is the Snippet's Note (the menu item's tooltip).
package snippets

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/lilyformac/lily/internal/launch"
)

// DefaultContext is Qwen3.6-35B-A3B's context window, used only when neither the engine nor the
// app's prediction of it says what the engine serves (see Params.ContextLength).
const DefaultContext = launch.DefaultContext

// Params describe the running (or next) engine.
type Params struct {
	BaseURL       string // OpenAI base URL, e.g. http://127.0.0.1:8000/v1
	Model         string // the id the engine reports (any name is accepted; this one is echoed)
	KeyEnv        string // the variable holding the API key; "" when the engine needs none
	ContextLength int    // the context the engine serves, or will serve; 0: unknown (DefaultContext is used)
	Lily          string // the lily command (Lily.app/Contents/MacOS/lily); "": lily, on PATH
}

// Kind is what a setup's text is: where it is pasted.
type Kind int

const (
	Shell    Kind = iota // commands for Terminal (zsh or bash)
	Settings             // text for a settings screen or file (Cline, Continue, Zed)
	Program              // a Python program
)

// Snippet is one client's setup.
type Snippet struct {
	ID    string // stable key: claude-code, claude-code-env, codex, …, cline, continue, zed, open-webui, python, curl
	Title string // the menu item: the client's name
	Kind  Kind
	Text  string // what the menu item copies
	Note  string // what to know about it (the menu item's tooltip)
}

// launchIDs are the snippet ids of the clients `lily launch` starts, by their command.
var launchIDs = map[string]string{"claude": "claude-code", "codex": "codex", "opencode": "opencode", "qwen": "qwen-code"}

// All returns the setups in menu order: each agent CLI through `lily launch`, then by its
// variables, then the others.
func All(p Params) []Snippet {
	var all []Snippet
	for _, client := range launch.Names() {
		all = append(all, launched(p, client), byHand(p, client))
	}
	return append(all, cline(p), continueDev(p), zed(p), openWebUI(p), python(p), curl(p))
}

func (p Params) context() int {
	if p.ContextLength > 0 {
		return p.ContextLength
	}
	return DefaultContext
}

// jsonStr quotes s for JSON, YAML double-quoted scalars and Python alike.
func jsonStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// target is the engine as internal/launch sees it; the key stays a variable reference.
func (p Params) target() launch.Target {
	return launch.Target{URL: launch.RootURL(p.BaseURL), Model: p.Model, Context: p.ContextLength, KeyEnv: p.KeyEnv}
}

// launchLine is the `lily launch` command for a client, with the flags this engine needs.
func (p Params) launchLine(client string) string {
	lily := p.Lily
	if lily == "" {
		lily = "lily"
	}
	line := launch.Quote(lily) + " launch " + client
	if root := launch.RootURL(p.BaseURL); root != launch.DefaultURL {
		line += " --url " + launch.Quote(root)
	}
	if p.KeyEnv != "" && p.KeyEnv != "LILY_API_KEY" { // lily launch reads $LILY_API_KEY itself
		line += ` --api-key "$` + p.KeyEnv + `"`
	}
	return line
}

// launched is the setup of a client through `lily launch`: that one line, which asks the running
// Lily for its model, context and key needs and starts the client configured for this run only.
func launched(p Params, client string) Snippet {
	c, _ := launch.Lookup(client)
	return Snippet{ID: launchIDs[client], Title: c.Title, Kind: Shell, Text: p.launchLine(client) + "\n",
		Note: fmt.Sprintf("Starts %s against Lily (Lily must be running; it writes no file). Paste into Terminal.", c.Title)}
}

// byHand is the same setup written out, as `lily launch --print` prints it but without its
// comment lines: the variables for this terminal, then the client.
func byHand(p Params, client string) Snippet {
	c, _ := launch.Lookup(client)
	s := c.Setup(p.target())
	var notes []string
	for _, v := range s.Env {
		if v.Why != "" && !slices.Contains(notes, v.Why) {
			notes = append(notes, v.Why)
		}
	}
	var lines []string
	for _, l := range strings.SplitAfter(s.Shell(), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, l)
		}
	}
	note := fmt.Sprintf("Sets %s's variables in this terminal, then starts it; for a context of %d tokens.", c.Title, p.context())
	if len(notes) > 0 {
		note += " " + strings.Join(notes, "; ") + "."
	}
	return Snippet{ID: launchIDs[client] + "-env", Title: c.Title + " (by its variables)", Kind: Shell, Text: strings.Join(lines, ""), Note: note}
}

func cline(p Params) Snippet {
	key := "any text (Lily needs no key, the field must not be empty)"
	if p.KeyEnv != "" {
		key = "the value of $" + p.KeyEnv
	}
	text := fmt.Sprintf(`Cline / Roo Code with Lily: in the extension's settings, choose

  API Provider:         OpenAI Compatible
  Base URL:             %s
  API Key:              %s
  Model ID:             %s
  Context Window Size:  %d

Cline cannot read the context window from an OpenAI-compatible server: set it, or Cline assumes a
smaller one and trims the conversation early.
`, p.BaseURL, key, p.Model, p.context())
	return Snippet{ID: "cline", Title: "Cline / Roo Code", Kind: Settings, Text: text, Note: "The values for Cline's or Roo Code's settings."}
}

func continueDev(p Params) Snippet {
	var b strings.Builder
	b.WriteString("# Continue with Lily: ~/.continue/config.yaml (add the model to your models: list)\n")
	b.WriteString("name: Lily\nversion: 0.0.1\nschema: v1\nmodels:\n")
	b.WriteString("  - name: Qwen3.6 35B-A3B (Lily)\n")
	b.WriteString("    provider: openai\n")
	fmt.Fprintf(&b, "    model: %s\n", jsonStr(p.Model))
	fmt.Fprintf(&b, "    apiBase: %s\n", jsonStr(p.BaseURL))
	if p.KeyEnv != "" {
		fmt.Fprintf(&b, "    apiKey: ${{ secrets.%s }} # %s=… in ~/.continue/.env\n", p.KeyEnv, p.KeyEnv)
	}
	b.WriteString("    roles: [chat, edit, apply]\n")
	b.WriteString("    defaultCompletionOptions:\n")
	fmt.Fprintf(&b, "      contextLength: %d\n", p.context())
	return Snippet{ID: "continue", Title: "Continue", Kind: Settings, Text: b.String(), Note: "A model for ~/.continue/config.yaml."}
}

func zed(p Params) Snippet {
	type caps struct {
		Tools             bool `json:"tools"`
		Images            bool `json:"images"`
		ParallelToolCalls bool `json:"parallel_tool_calls"`
		PromptCacheKey    bool `json:"prompt_cache_key"`
	}
	type model struct {
		Name         string `json:"name"`
		DisplayName  string `json:"display_name"`
		MaxTokens    int    `json:"max_tokens"`
		Capabilities caps   `json:"capabilities"`
	}
	type provider struct {
		APIURL          string  `json:"api_url"`
		AvailableModels []model `json:"available_models"`
	}
	settings := map[string]any{"language_models": map[string]any{"openai_compatible": map[string]provider{
		"Lily": {APIURL: p.BaseURL, AvailableModels: []model{{
			Name: p.Model, DisplayName: "Qwen3.6 35B-A3B (Lily)", MaxTokens: p.context(),
			Capabilities: caps{Tools: true},
		}}},
	}}}
	body, _ := json.MarshalIndent(settings, "", "  ")
	key := "// Lily needs no key; if Zed asks for one, enter any text.\n"
	if p.KeyEnv != "" {
		key = "// Zed reads the key of a provider named \"Lily\" from $" + p.KeyEnv + ", or asks for it in Agent Settings.\n"
	}
	text := "// Zed with Lily: merge into ~/.config/zed/settings.json (zed: open settings)\n" + key + string(body) + "\n"
	return Snippet{ID: "zed", Title: "Zed", Kind: Settings, Text: text, Note: "A provider for Zed's settings.json."}
}

// dockerHost rewrites a loopback base URL for a client inside a Docker container, which reaches
// this Mac as host.docker.internal.
func dockerHost(u string) string {
	for _, h := range []string{"127.0.0.1", "localhost", "[::1]"} {
		if strings.HasPrefix(u, "http://"+h+":") {
			return "http://host.docker.internal:" + strings.TrimPrefix(u, "http://"+h+":")
		}
	}
	return u
}

func openWebUI(p Params) Snippet {
	key, note := "lily", " Lily needs no key, but Open WebUI wants one set: any text does."
	if p.KeyEnv != "" {
		key, note = `"$`+p.KeyEnv+`"`, ""
	}
	text := fmt.Sprintf(`docker run -d --name open-webui -p 3000:8080 -v open-webui:/app/backend/data \
  -e OPENAI_API_BASE_URL=%s \
  -e OPENAI_API_KEY=%s \
  ghcr.io/open-webui/open-webui:main
`, launch.Quote(dockerHost(p.BaseURL)), key)
	return Snippet{ID: "open-webui", Title: "Open WebUI", Kind: Shell, Text: text,
		Note: fmt.Sprintf("Runs Open WebUI in Docker (it reaches this Mac as host.docker.internal); then open http://localhost:3000 and pick the model %s.%s "+
			"Without Docker: OPENAI_API_BASE_URL=%s OPENAI_API_KEY=%s open-webui serve. Already running? Admin Panel › Settings › Connections › OpenAI API: add %s.",
			p.Model, note, launch.Quote(p.BaseURL), key, p.BaseURL)}
}

func python(p Params) Snippet {
	imports, key := "", `"lily",  # Lily needs no key; the SDK wants one set`
	if p.KeyEnv != "" {
		imports, key = "import os\n\n", "os.environ["+jsonStr(p.KeyEnv)+"],"
	}
	text := fmt.Sprintf(`# Python with Lily (pip install openai)
%sfrom openai import OpenAI

client = OpenAI(
    base_url=%s,
    api_key=%s
)
response = client.chat.completions.create(
    model=%s,
    messages=[{"role": "user", "content": "Hello!"}],
)
print(response.choices[0].message.content)
`, imports, jsonStr(p.BaseURL), key, jsonStr(p.Model))
	return Snippet{ID: "python", Title: "Python (openai)", Kind: Program, Text: text, Note: "A Python program (pip install openai)."}
}

func curl(p Params) Snippet {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	body, _ := json.Marshal(struct {
		Model    string    `json:"model"`
		Messages []message `json:"messages"`
	}{p.Model, []message{{"user", "Hello!"}}})
	var b strings.Builder
	fmt.Fprintf(&b, "curl %s \\\n", launch.Quote(p.BaseURL+"/chat/completions"))
	b.WriteString("  -H 'Content-Type: application/json' \\\n")
	if p.KeyEnv != "" {
		fmt.Fprintf(&b, "  -H \"Authorization: Bearer $%s\" \\\n", p.KeyEnv)
	}
	fmt.Fprintf(&b, "  -d %s\n", launch.Quote(string(body)))
	return Snippet{ID: "curl", Title: "curl", Kind: Shell, Text: b.String(), Note: "Asks Lily one question from Terminal."}
}
