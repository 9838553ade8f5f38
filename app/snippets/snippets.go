// Package snippets writes the ready-to-paste setups of the menu's "Use with…" submenu: how to
// point Claude Code, Codex CLI, Cline/Roo Code, Continue, Zed, Open WebUI, Python and curl at
// Lily's base URL, model id and (when one is set) API key variable.
package snippets

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Capabilities are the API dialects the engine serves besides OpenAI Chat Completions.
type Capabilities struct {
	Messages  bool // Anthropic POST /v1/messages (+ count_tokens): what Claude Code speaks
	Responses bool // OpenAI POST /v1/responses: what Codex CLI speaks
}

// Engine is what `lily serve` offers today: Chat Completions and Completions only.
var Engine = Capabilities{}

// DefaultContext is Qwen3.6-35B-A3B's context window, used when the engine has not said its own.
const DefaultContext = 262144

// Params describe the running (or next) engine.
type Params struct {
	BaseURL       string // OpenAI base URL, e.g. http://127.0.0.1:8000/v1
	Model         string // the id the engine reports (any name is accepted; this one is echoed)
	KeyEnv        string // the variable holding the API key; "" when the engine needs none
	ContextLength int    // the engine's context window; 0: unknown (DefaultContext is used)
	Caps          Capabilities
}

// Snippet is one client's setup.
type Snippet struct {
	ID    string // stable key: claude-code, codex, cline, continue, zed, open-webui, python, curl
	Title string // the client's name
	Ready bool   // false: the client cannot use Lily yet; the text says why and what to do
	Note  string // when not Ready: a few words for the menu, e.g. "needs a proxy for now"
	Text  string // what the menu item copies
}

// All returns the setups in menu order.
func All(p Params) []Snippet {
	return []Snippet{
		claudeCode(p), codex(p), cline(p), continueDev(p), zed(p), openWebUI(p), python(p), curl(p),
	}
}

// rootURL is the base URL without its /v1 (what Anthropic clients want).
func (p Params) rootURL() string {
	return strings.TrimSuffix(strings.TrimSuffix(p.BaseURL, "/"), "/v1")
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

// tomlStr quotes s as a TOML basic string.
func tomlStr(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// shellWord quotes s for a POSIX shell when it needs quoting.
func shellWord(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func claudeCode(p Params) Snippet {
	var b strings.Builder
	m := shellWord(p.Model)
	token := `"$` + p.KeyEnv + `"`
	if p.KeyEnv == "" {
		token = "lily # Lily needs no key; Claude Code wants one set"
	}
	if p.Caps.Messages {
		b.WriteString("# Claude Code with Lily: run these in the shell you start `claude` from.\n")
		fmt.Fprintf(&b, "export ANTHROPIC_BASE_URL=%s\n", shellWord(p.rootURL()))
	} else {
		fmt.Fprintf(&b, `# Claude Code with Lily: not possible directly yet.
#
# Claude Code speaks Anthropic's Messages API (POST /v1/messages). Lily serves the OpenAI API
# only for now (%s), so pointing ANTHROPIC_BASE_URL at Lily fails.
# Until Lily has /v1/messages, run a proxy that translates Anthropic requests to OpenAI Chat
# Completions (LiteLLM is one) in front of %s, and point Claude Code at the proxy:
export ANTHROPIC_BASE_URL=http://127.0.0.1:4000 # the proxy's address, not Lily's
`, p.BaseURL, p.BaseURL)
	}
	fmt.Fprintf(&b, "export ANTHROPIC_AUTH_TOKEN=%s\n", token)
	b.WriteString("# Claude Code asks for Claude models by name unless told otherwise:\n")
	for _, v := range []string{"ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"} {
		fmt.Fprintf(&b, "export %s=%s\n", v, m)
	}
	b.WriteString("# A per-request header would change the prompt's prefix and defeat Lily's prompt cache:\n")
	b.WriteString("export CLAUDE_CODE_ATTRIBUTION_HEADER=0\n")
	fmt.Fprintf(&b, "export CLAUDE_CODE_AUTO_COMPACT_WINDOW=%d # Lily's context window\n", p.context())
	b.WriteString("claude\n")
	sn := Snippet{ID: "claude-code", Title: "Claude Code", Ready: p.Caps.Messages, Text: b.String()}
	if !sn.Ready {
		sn.Note = "needs a proxy for now"
	}
	return sn
}

func codex(p Params) Snippet {
	var b strings.Builder
	if p.Caps.Responses {
		b.WriteString("# Codex CLI with Lily: add to ~/.codex/config.toml\n")
	} else {
		fmt.Fprintf(&b, `# Codex CLI with Lily: not possible yet.
#
# Current Codex releases reach custom providers only through the OpenAI Responses API
# (wire_api = "responses", POST /v1/responses). Lily serves Chat Completions
# (%s/chat/completions) for now, so Codex fails against it until Lily has /v1/responses.
# This is the ~/.codex/config.toml to use once it does:
`, p.BaseURL)
	}
	fmt.Fprintf(&b, "model = %s\n", tomlStr(p.Model))
	b.WriteString("model_provider = \"lily\"\n")
	fmt.Fprintf(&b, "model_context_window = %d\n\n", p.context())
	b.WriteString("[model_providers.lily]\n")
	b.WriteString("name = \"Lily\"\n")
	fmt.Fprintf(&b, "base_url = %s\n", tomlStr(p.BaseURL))
	b.WriteString("wire_api = \"responses\"\n")
	if p.KeyEnv != "" {
		fmt.Fprintf(&b, "env_key = %s # Codex reads the key from this variable\n", tomlStr(p.KeyEnv))
	}
	sn := Snippet{ID: "codex", Title: "Codex CLI", Ready: p.Caps.Responses, Text: b.String()}
	if !sn.Ready {
		sn.Note = "not supported yet"
	}
	return sn
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
	return Snippet{ID: "cline", Title: "Cline / Roo Code", Ready: true, Text: text}
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
	return Snippet{ID: "continue", Title: "Continue", Ready: true, Text: b.String()}
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
	return Snippet{ID: "zed", Title: "Zed", Ready: true, Text: text}
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
	key, note := "lily", "# Lily needs no key, but Open WebUI wants one set: any text does.\n"
	if p.KeyEnv != "" {
		key, note = `"$`+p.KeyEnv+`"`, ""
	}
	text := fmt.Sprintf(`# Open WebUI with Lily; in its chat, pick the model %s.
%s#
# In Docker (the container reaches this Mac as host.docker.internal), then open http://localhost:3000
docker run -d --name open-webui -p 3000:8080 -v open-webui:/app/backend/data \
  -e OPENAI_API_BASE_URL=%s \
  -e OPENAI_API_KEY=%s \
  ghcr.io/open-webui/open-webui:main
#
# Or without Docker (pip install open-webui), then open http://localhost:8080
#   OPENAI_API_BASE_URL=%s OPENAI_API_KEY=%s open-webui serve
#
# Already running? Admin Panel > Settings > Connections > OpenAI API: add the URL above.
`, p.Model, note, shellWord(dockerHost(p.BaseURL)), key, shellWord(p.BaseURL), key)
	return Snippet{ID: "open-webui", Title: "Open WebUI", Ready: true, Text: text}
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
	return Snippet{ID: "python", Title: "Python (openai)", Ready: true, Text: text}
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
	b.WriteString("# curl with Lily\n")
	fmt.Fprintf(&b, "curl %s \\\n", shellWord(p.BaseURL+"/chat/completions"))
	b.WriteString("  -H 'Content-Type: application/json' \\\n")
	if p.KeyEnv != "" {
		fmt.Fprintf(&b, "  -H \"Authorization: Bearer $%s\" \\\n", p.KeyEnv)
	}
	fmt.Fprintf(&b, "  -d %s\n", shellWord(string(body)))
	return Snippet{ID: "curl", Title: "curl", Ready: true, Text: b.String()}
}
