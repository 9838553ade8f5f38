package snippets

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/pelletier/go-toml/v2"
)

const base = "http://127.0.0.1:8000/v1"

func params(key string, caps Capabilities) Params {
	return Params{BaseURL: base, Model: "Qwen3.6-35B-A3B-4bit", KeyEnv: key, ContextLength: 131072, Caps: caps}
}

func byID(t *testing.T, p Params, id string) Snippet {
	t.Helper()
	for _, s := range All(p) {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("no snippet %q", id)
	return Snippet{}
}

// TestEverySnippetNamesURLModelAndKey: each setup names the base URL (Claude Code with the
// Messages API: the root URL), the model id, and the key variable exactly when one is set.
func TestEverySnippetNamesURLModelAndKey(t *testing.T) {
	for _, caps := range []Capabilities{Engine, {Messages: true, Responses: true}} {
		for _, key := range []string{"", "LILY_API_KEY"} {
			p := params(key, caps)
			all := All(p)
			if len(all) != 8 {
				t.Fatalf("%d snippets", len(all))
			}
			for _, s := range all {
				url := base
				if s.ID == "claude-code" {
					url = "http://127.0.0.1:8000"
				}
				if !strings.Contains(s.Text, url) || !strings.Contains(s.Text, p.Model) {
					t.Errorf("%s (caps %+v): lacks the URL or model:\n%s", s.ID, caps, s.Text)
				}
				if got := strings.Contains(s.Text, "LILY_API_KEY"); got != (key != "") {
					t.Errorf("%s (key %q): mentions the key variable: %v\n%s", s.ID, key, got, s.Text)
				}
				if s.Title == "" || s.ID == "" {
					t.Errorf("untitled snippet %+v", s)
				}
				if !strings.Contains(s.Text, "131072") && (s.ID == "cline" || s.ID == "continue" || s.ID == "zed" || s.ID == "codex") {
					t.Errorf("%s: does not give the context window", s.ID)
				}
			}
		}
	}
}

// TestHonestAboutMissingDialects: with today's engine, Claude Code and Codex say they cannot use
// Lily directly, and why, instead of pretending.
func TestHonestAboutMissingDialects(t *testing.T) {
	p := params("", Engine)
	cc := byID(t, p, "claude-code")
	if cc.Ready || !strings.Contains(cc.Text, "not possible directly yet") || !strings.Contains(cc.Text, "/v1/messages") ||
		strings.Contains(cc.Text, "ANTHROPIC_BASE_URL=http://127.0.0.1:8000\n") || cc.Note != "needs a proxy for now" {
		t.Fatalf("Claude Code snippet is not honest:\n%s", cc.Text)
	}
	cx := byID(t, p, "codex")
	if cx.Ready || !strings.Contains(cx.Text, "not possible yet") || !strings.Contains(cx.Text, "/v1/responses") || cx.Note != "not supported yet" {
		t.Fatalf("Codex snippet is not honest:\n%s", cx.Text)
	}
	// Once the engine has the dialects, the same snippets become plain setups.
	p.Caps = Capabilities{Messages: true, Responses: true}
	cc = byID(t, p, "claude-code")
	if !cc.Ready || strings.Contains(cc.Text, "not possible") || !strings.Contains(cc.Text, "export ANTHROPIC_BASE_URL=http://127.0.0.1:8000\n") {
		t.Fatalf("Claude Code with Messages:\n%s", cc.Text)
	}
	if cx = byID(t, p, "codex"); !cx.Ready || strings.Contains(cx.Text, "not possible") {
		t.Fatalf("Codex with Responses:\n%s", cx.Text)
	}
	for _, s := range All(p) {
		if !s.Ready || s.Note != "" {
			t.Errorf("%s not ready with every dialect", s.ID)
		}
	}
}

func TestClaudeCodeVariables(t *testing.T) {
	s := byID(t, params("LILY_API_KEY", Capabilities{Messages: true}), "claude-code")
	for _, want := range []string{
		`export ANTHROPIC_AUTH_TOKEN="$LILY_API_KEY"`,
		"export ANTHROPIC_MODEL=Qwen3.6-35B-A3B-4bit",
		"export ANTHROPIC_DEFAULT_SONNET_MODEL=Qwen3.6-35B-A3B-4bit",
		"export ANTHROPIC_DEFAULT_HAIKU_MODEL=Qwen3.6-35B-A3B-4bit",
		"export CLAUDE_CODE_SUBAGENT_MODEL=Qwen3.6-35B-A3B-4bit",
		"export CLAUDE_CODE_ATTRIBUTION_HEADER=0",
	} {
		if !strings.Contains(s.Text, want+"\n") && !strings.Contains(s.Text, want+" ") {
			t.Errorf("lacks %q:\n%s", want, s.Text)
		}
	}
}

// TestCodexTOML parses the Codex snippet as TOML (its prose is TOML comments).
func TestCodexTOML(t *testing.T) {
	for _, key := range []string{"", "LILY_API_KEY"} {
		var cfg struct {
			Model          string `toml:"model"`
			ModelProvider  string `toml:"model_provider"`
			ContextWindow  int    `toml:"model_context_window"`
			ModelProviders map[string]struct {
				Name    string `toml:"name"`
				BaseURL string `toml:"base_url"`
				WireAPI string `toml:"wire_api"`
				EnvKey  string `toml:"env_key"`
			} `toml:"model_providers"`
		}
		text := byID(t, params(key, Engine), "codex").Text
		if err := toml.Unmarshal([]byte(text), &cfg); err != nil {
			t.Fatalf("%v\n%s", err, text)
		}
		pr := cfg.ModelProviders[cfg.ModelProvider]
		if cfg.Model != "Qwen3.6-35B-A3B-4bit" || pr.BaseURL != base || pr.WireAPI != "responses" || pr.EnvKey != key || cfg.ContextWindow != 131072 {
			t.Fatalf("%+v", cfg)
		}
	}
}

// TestContinueYAML parses the Continue snippet as YAML.
func TestContinueYAML(t *testing.T) {
	var cfg struct {
		Name, Version, Schema string
		Models                []struct {
			Name, Provider, Model    string
			APIBase                  string `yaml:"apiBase"`
			APIKey                   string `yaml:"apiKey"`
			Roles                    []string
			DefaultCompletionOptions struct {
				ContextLength int `yaml:"contextLength"`
			} `yaml:"defaultCompletionOptions"`
		}
	}
	text := byID(t, params("LILY_API_KEY", Engine), "continue").Text
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if len(cfg.Models) != 1 {
		t.Fatalf("%+v", cfg)
	}
	m := cfg.Models[0]
	if cfg.Schema != "v1" || m.Provider != "openai" || m.Model != "Qwen3.6-35B-A3B-4bit" || m.APIBase != base ||
		m.APIKey != "${{ secrets.LILY_API_KEY }}" || m.DefaultCompletionOptions.ContextLength != 131072 {
		t.Fatalf("%+v", m)
	}
}

// TestZedJSON: apart from its // comment lines, the Zed snippet is a JSON settings object.
func TestZedJSON(t *testing.T) {
	text := byID(t, params("", Engine), "zed").Text
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "//") {
			lines = append(lines, l)
		}
	}
	var cfg struct {
		LanguageModels struct {
			OpenAICompatible map[string]struct {
				APIURL          string `json:"api_url"`
				AvailableModels []struct {
					Name         string
					MaxTokens    int `json:"max_tokens"`
					Capabilities map[string]bool
				} `json:"available_models"`
			} `json:"openai_compatible"`
		} `json:"language_models"`
	}
	if err := json.Unmarshal([]byte(strings.Join(lines, "\n")), &cfg); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	lily := cfg.LanguageModels.OpenAICompatible["Lily"]
	if lily.APIURL != base || len(lily.AvailableModels) != 1 || lily.AvailableModels[0].MaxTokens != 131072 || !lily.AvailableModels[0].Capabilities["tools"] {
		t.Fatalf("%+v", cfg)
	}
}

func TestOpenWebUIUsesDockerHost(t *testing.T) {
	text := byID(t, params("", Engine), "open-webui").Text
	if !strings.Contains(text, "OPENAI_API_BASE_URL=http://host.docker.internal:8000/v1") || !strings.Contains(text, "OPENAI_API_BASE_URL="+base) {
		t.Fatal(text)
	}
	if got := dockerHost("http://10.0.0.5:8000/v1"); got != "http://10.0.0.5:8000/v1" {
		t.Fatal(got)
	}
}

// TestShellSnippetsParse runs sh -n over the shell setups.
func TestShellSnippetsParse(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	for _, key := range []string{"", "LILY_API_KEY"} {
		for _, id := range []string{"claude-code", "open-webui", "curl"} {
			p := params(key, Engine)
			p.Model = `it's "odd" $HOME`
			text := byID(t, p, id).Text
			for _, l := range strings.Split(text, "\n") {
				if strings.HasSuffix(l, "\\") && strings.Contains(l, " #") {
					t.Errorf("%s: a comment swallows the line continuation: %q", id, l)
				}
			}
			cmd := exec.Command("sh", "-n")
			cmd.Stdin = strings.NewReader(text)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: %v %s\n%s", id, err, out, text)
			}
		}
	}
}

// TestPythonParses checks the Python setup with python3's parser, when there is one.
func TestPythonParses(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	for _, key := range []string{"", "LILY_API_KEY"} {
		p := params(key, Engine)
		p.Model = `it's "odd"`
		text := byID(t, p, "python").Text
		cmd := exec.Command(py, "-c", "import ast, sys; ast.parse(sys.stdin.read())")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%v %s\n%s", err, out, text)
		}
	}
}

// TestCurlRuns runs the curl setup against a stand-in server and checks what arrives.
func TestCurlRuns(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	type got struct {
		path, auth, model string
	}
	seen := make(chan got, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ Model string }
		json.Unmarshal(body, &req)
		seen <- got{r.URL.Path, r.Header.Get("Authorization"), req.Model}
		io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}]}`)
	}))
	defer srv.Close()
	p := Params{BaseURL: srv.URL + "/v1", Model: `it's "odd"`, KeyEnv: "LILY_API_KEY"}
	cmd := exec.Command("sh", "-c", byID(t, p, "curl").Text)
	cmd.Env = append(os.Environ(), "LILY_API_KEY=sk-test")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if g := <-seen; g.path != "/v1/chat/completions" || g.auth != "Bearer sk-test" || g.model != `it's "odd"` {
		t.Fatalf("%+v", g)
	}
}

// TestOddModelIDsStayIntact: quoting keeps an unusual model id exact in every structured format.
func TestOddModelIDsStayIntact(t *testing.T) {
	p := params("", Engine)
	p.Model = `my "model" \ id`
	var c struct{ Model string }
	if err := toml.Unmarshal([]byte(byID(t, p, "codex").Text), &c); err != nil || c.Model != p.Model {
		t.Fatalf("toml: %q %v", c.Model, err)
	}
	var y struct{ Models []struct{ Model string } }
	if err := yaml.Unmarshal([]byte(byID(t, p, "continue").Text), &y); err != nil || len(y.Models) != 1 || y.Models[0].Model != p.Model {
		t.Fatalf("yaml: %+v %v", y, err)
	}
}

func TestUnknownContextUsesTheModels(t *testing.T) {
	p := params("", Engine)
	p.ContextLength = 0
	if !strings.Contains(byID(t, p, "cline").Text, "262144") {
		t.Fatal("no default context")
	}
}
