package launch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// maxOutput is the answer length clients plan for: a quarter of the window, at most 32,768.
func maxOutput(ctx int) int { return min(32768, ctx/4) }

// claude points Claude Code at Lily's Anthropic Messages API.
func claude(t Target) Setup {
	env := []Var{
		{Name: "ANTHROPIC_BASE_URL", Value: t.URL, Why: "The root URL: Claude Code adds /v1/messages itself"},
		t.keyVar("ANTHROPIC_AUTH_TOKEN"),
		{Name: "ANTHROPIC_API_KEY", Value: "", Why: "Emptied, so that a real Anthropic key in this shell is not sent"},
	}
	for i, name := range []string{"ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"} {
		v := Var{Name: name, Value: t.Model}
		if i == 0 {
			v.Why = "Claude Code asks for Claude models by name unless told otherwise"
		}
		env = append(env, v)
	}
	ctx := strconv.Itoa(t.context())
	env = append(env,
		Var{Name: "CLAUDE_CODE_ATTRIBUTION_HEADER", Value: "0", Why: "A per-request header would change the prompt's prefix and defeat Lily's prefix cache"},
		Var{Name: "CLAUDE_CODE_AUTO_COMPACT_WINDOW", Value: ctx, Why: "Lily's context window"},
		Var{Name: "CLAUDE_CODE_MAX_CONTEXT_TOKENS", Value: ctx},
		// Claude Code keeps room for a whole answer below the window: its default 32,000 would
		// leave too little of a small one for the prompt itself.
		Var{Name: "CLAUDE_CODE_MAX_OUTPUT_TOKENS", Value: strconv.Itoa(maxOutput(t.context()))},
		// The session runs on a local model: there is nothing in it for Anthropic's telemetry,
		// error reports or other background requests, and nothing should leave the machine.
		Var{Name: "DISABLE_TELEMETRY", Value: "1", Why: "A session on a local model reports nothing to Anthropic"},
		Var{Name: "DISABLE_ERROR_REPORTING", Value: "1"},
		Var{Name: "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", Value: "1"},
	)
	return Setup{Env: env, Args: []string{"--model", t.Model}}
}

// codexKeyEnv is the variable Codex reads Lily's key from.
const codexKeyEnv = "LILY_API_KEY"

// codex points Codex CLI at Lily's Responses API through -c overrides (TOML values), which
// apply to this run only: ~/.codex/config.toml is left as it is.
func codex(t Target) Setup {
	provider := `name="Lily", base_url=` + tomlString(t.apiURL())
	var env []Var
	// Without a key Codex sends no Authorization header, which is what a keyless Lily wants; a
	// placeholder key would have to be exported, and `lily serve` would then read it as its own.
	if t.hasKey() {
		provider += `, env_key="` + codexKeyEnv + `"`
		env = append(env, t.keyVar(codexKeyEnv))
	}
	ctx := t.context()
	args := []string{
		"-c", `model_provider="lily"`,
		"-c", "model_providers.lily={" + provider + `, wire_api="responses"}`,
		"-c", "model=" + tomlString(t.Model),
		"-c", "model_context_window=" + strconv.Itoa(ctx),
		"-c", "model_auto_compact_token_limit=" + strconv.Itoa(ctx*9/10),
		"-c", `web_search="disabled"`, // a hosted tool: Lily cannot run it
	}
	return Setup{Env: env, Args: args}
}

// opencode adds a "lily" provider through OPENCODE_CONFIG_CONTENT, which opencode merges over
// the user's own configuration for this run.
func opencode(t Target) Setup {
	model := "lily/" + t.Model
	v := Var{Name: "OPENCODE_CONFIG_CONTENT", Value: opencodeConfig(t, t.keyVar("").Value)}
	if t.KeyEnv != "" {
		v.Shell = opencodeShell(t)
	}
	return Setup{Env: []Var{v}, Args: []string{"--model", model}}
}

// keySlot stands for the key in the JSON while shell lines splice "$KeyEnv" into it; JSON
// writes it as \u0000, which no model id of a real server holds.
const keySlot = "\x00"

// opencodeShell writes the configuration with the key variable spliced in, so that copied
// lines carry no key (a key with quotes or backslashes in it would need JSON escapes there).
func opencodeShell(t Target) string {
	js := opencodeConfig(t, keySlot)
	slot := `\u0000`
	if strings.Count(js, slot) != 1 {
		return Quote(opencodeConfig(t, t.Key))
	}
	before, after, _ := strings.Cut(js, slot)
	return Quote(before) + `"$` + t.KeyEnv + `"` + Quote(after)
}

func opencodeConfig(t Target, key string) string {
	type limit struct {
		Context int `json:"context"`
		Output  int `json:"output"`
	}
	type model struct {
		Name  string `json:"name"`
		Limit limit  `json:"limit"`
	}
	type options struct {
		BaseURL string `json:"baseURL"`
		APIKey  string `json:"apiKey"`
	}
	type provider struct {
		NPM     string           `json:"npm"`
		Name    string           `json:"name"`
		Options options          `json:"options"`
		Models  map[string]model `json:"models"`
	}
	ctx := t.context()
	cfg := struct {
		Provider   map[string]provider `json:"provider"`
		Model      string              `json:"model"`
		SmallModel string              `json:"small_model"`
	}{
		Provider: map[string]provider{"lily": {
			NPM: "@ai-sdk/openai-compatible", Name: "Lily",
			Options: options{BaseURL: t.apiURL(), APIKey: key},
			Models:  map[string]model{t.Model: {Name: t.Model, Limit: limit{Context: ctx, Output: maxOutput(ctx)}}},
		}},
		Model: "lily/" + t.Model, SmallModel: "lily/" + t.Model,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cfg); err != nil {
		panic(fmt.Sprintf("opencode config: %v", err)) // strings and ints only: cannot fail
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// qwen points Qwen Code at Lily's chat completions. --auth-type and --model win over what the
// user's settings select (Qwen OAuth, another model), without changing those settings.
func qwen(t Target) Setup {
	env := []Var{
		{Name: "OPENAI_BASE_URL", Value: t.apiURL()},
		t.keyVar("OPENAI_API_KEY"),
		{Name: "OPENAI_MODEL", Value: t.Model},
	}
	return Setup{Env: env, Args: []string{"--auth-type", "openai", "--model", t.Model}}
}
