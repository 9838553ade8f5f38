package snippets

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/pelletier/go-toml/v2"

	"github.com/lilyformac/lily/internal/launch"
)

const base = "http://127.0.0.1:8000/v1"

func params(key string) Params {
	return Params{BaseURL: base, Model: "Qwen3.6-35B-A3B-4bit", KeyEnv: key, ContextLength: 131072}
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

// launchable are the snippets of the clients `lily launch` starts, by their command.
var launchable = map[string]string{"claude-code": "claude", "codex": "codex", "opencode": "opencode", "qwen-code": "qwen"}

// TestEverySnippetNamesURLModelAndKey: each written-out setup names the base URL (Claude Code:
// the root URL), the model id, and the key variable exactly when one is set; the `lily launch`
// lines need none of them (lily launch asks the running server).
func TestEverySnippetNamesURLModelAndKey(t *testing.T) {
	for _, key := range []string{"", "LILY_API_KEY"} {
		p := params(key)
		all := All(p)
		if len(all) != 14 {
			t.Fatalf("%d snippets", len(all))
		}
		for _, s := range all {
			if s.Title == "" || s.ID == "" || s.Note == "" {
				t.Errorf("untitled snippet %+v", s)
			}
			if _, ok := launchable[s.ID]; ok {
				continue // TestAgentSetupsAreOneBlock
			}
			url, text := base, s.Text
			if s.ID == "claude-code-env" {
				url = "http://127.0.0.1:8000\n"
			}
			if s.ID == "open-webui" { // the model to pick is in its note
				text += s.Note
			}
			if !strings.Contains(text, url) || !strings.Contains(text, p.Model) {
				t.Errorf("%s: lacks the URL or model:\n%s", s.ID, s.Text)
			}
			if got := strings.Contains(s.Text, "LILY_API_KEY"); got != (key != "") {
				t.Errorf("%s (key %q): mentions the key variable: %v\n%s", s.ID, key, got, s.Text)
			}
			if !strings.Contains(s.Text, "131072") && s.ID != "qwen-code-env" && s.ID != "open-webui" && s.ID != "python" && s.ID != "curl" {
				t.Errorf("%s: does not give the context window", s.ID)
			}
		}
	}
}

// TestAgentSetupsAreOneBlock: each agent CLI's setup is its `lily launch` line alone; the
// written-out form is its own item with exactly `lily launch --print`'s variables and command,
// without comment lines.
func TestAgentSetupsAreOneBlock(t *testing.T) {
	for _, key := range []string{"", "LILY_API_KEY"} {
		p := params(key)
		for id, client := range launchable {
			s := byID(t, p, id)
			if s.Text != "lily launch "+client+"\n" || s.Kind != Shell {
				t.Errorf("%s: %q", id, s.Text)
			}
			env := byID(t, p, id+"-env")
			c, _ := launch.Lookup(client)
			want := c.Setup(p.target()).Shell()
			if strings.Contains(env.Text, "#") || strings.Contains(env.Text, "lily launch") || !strings.HasSuffix(env.Text, commandOf(want)) {
				t.Errorf("%s-env:\n%s\nwant the variables and command of\n%s", id, env.Text, want)
			}
			for _, l := range strings.Split(want, "\n") {
				if strings.HasPrefix(l, "export ") && !strings.Contains(env.Text, l+"\n") {
					t.Errorf("%s-env lacks %q", id, l)
				}
			}
		}
	}
	// The app's own lily, on another port: named by path, with --url.
	p := params("")
	p.BaseURL, p.Lily = "http://127.0.0.1:8001/v1", "/Applications/My Apps/Lily.app/Contents/MacOS/lily"
	if got := byID(t, p, "codex").Text; got != "'/Applications/My Apps/Lily.app/Contents/MacOS/lily' launch codex --url http://127.0.0.1:8001\n" {
		t.Fatal(got)
	}
}

// commandOf is the client's command: the lines after the last export.
func commandOf(shell string) string {
	lines := strings.SplitAfter(shell, "\n")
	last := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "export ") {
			last = i + 1
		}
	}
	return strings.Join(lines[last:], "")
}

func TestClaudeCodeVariables(t *testing.T) {
	s := byID(t, params("LILY_API_KEY"), "claude-code-env")
	for _, want := range []string{
		"export ANTHROPIC_BASE_URL=http://127.0.0.1:8000",
		`export ANTHROPIC_AUTH_TOKEN="$LILY_API_KEY"`,
		"export ANTHROPIC_API_KEY=''",
		"export ANTHROPIC_MODEL=Qwen3.6-35B-A3B-4bit",
		"export ANTHROPIC_DEFAULT_SONNET_MODEL=Qwen3.6-35B-A3B-4bit",
		"export ANTHROPIC_DEFAULT_HAIKU_MODEL=Qwen3.6-35B-A3B-4bit",
		"export CLAUDE_CODE_SUBAGENT_MODEL=Qwen3.6-35B-A3B-4bit",
		"export CLAUDE_CODE_ATTRIBUTION_HEADER=0",
		"export CLAUDE_CODE_AUTO_COMPACT_WINDOW=131072",
		"export CLAUDE_CODE_MAX_OUTPUT_TOKENS=32768",
		"export DISABLE_TELEMETRY=1",
		"claude --model Qwen3.6-35B-A3B-4bit",
	} {
		if !strings.Contains(s.Text, want+"\n") {
			t.Errorf("lacks %q:\n%s", want, s.Text)
		}
	}
}

// ran is what one command got when a snippet ran under sh with fakes on PATH.
type ran struct {
	args []string
	env  map[string]string
}

// runWithFakes runs a snippet under sh with stand-ins for lily and the client, which record
// their arguments and environment instead of doing anything.
func runWithFakes(t *testing.T, text string, env ...string) map[string]ran {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	names := []string{"lily"}
	for _, c := range launchable {
		names = append(names, c)
	}
	for _, name := range names {
		script := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done >" + launch.Quote(filepath.Join(dir, name+".args")) +
			"\nenv >" + launch.Quote(filepath.Join(dir, name+".env")) + "\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", "-c", text)
	cmd.Env = append(os.Environ(), append(env, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %s\n%s", err, out, text)
	}
	got := map[string]ran{}
	for _, name := range names {
		raw, err := os.ReadFile(filepath.Join(dir, name+".args"))
		if err != nil {
			continue // not run
		}
		r := ran{args: strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00"), env: map[string]string{}}
		envText, _ := os.ReadFile(filepath.Join(dir, name+".env"))
		for _, l := range strings.Split(string(envText), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				r.env[k] = v
			}
		}
		got[name] = r
	}
	return got
}

type codexConfig struct {
	Model          string `toml:"model"`
	ModelProvider  string `toml:"model_provider"`
	ContextWindow  int    `toml:"model_context_window"`
	CompactLimit   int    `toml:"model_auto_compact_token_limit"`
	WebSearch      string `toml:"web_search"`
	ModelProviders map[string]struct {
		Name    string `toml:"name"`
		BaseURL string `toml:"base_url"`
		WireAPI string `toml:"wire_api"`
		EnvKey  string `toml:"env_key"`
	} `toml:"model_providers"`
}

// codexOverrides runs the Codex snippet and reads its -c overrides as one TOML document.
func codexOverrides(t *testing.T, p Params) codexConfig {
	t.Helper()
	got := runWithFakes(t, byID(t, p, "codex-env").Text, "LILY_API_KEY=sk-test")["codex"]
	var doc []string
	for i := 0; i+1 < len(got.args); i += 2 {
		if got.args[i] != "-c" {
			t.Fatalf("codex args %q", got.args)
		}
		doc = append(doc, got.args[i+1])
	}
	var cfg codexConfig
	if err := toml.Unmarshal([]byte(strings.Join(doc, "\n")), &cfg); err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(doc, "\n"))
	}
	return cfg
}

// TestCodexOverrides: the Codex snippet's -c overrides are TOML that selects a "lily" provider
// on the Responses API.
func TestCodexOverrides(t *testing.T) {
	for _, key := range []string{"", "LILY_API_KEY"} {
		cfg := codexOverrides(t, params(key))
		pr := cfg.ModelProviders[cfg.ModelProvider]
		if cfg.ModelProvider != "lily" || cfg.Model != "Qwen3.6-35B-A3B-4bit" || pr.BaseURL != base || pr.WireAPI != "responses" ||
			pr.EnvKey != key || cfg.ContextWindow != 131072 || cfg.CompactLimit != 117964 || cfg.WebSearch != "disabled" {
			t.Fatalf("key %q: %+v", key, cfg)
		}
	}
}

// TestOpencodeAndQwenRun: run by hand, opencode gets its provider JSON (key included) and Qwen Code
// its OpenAI variables; the short way runs lily launch, and only that.
func TestOpencodeAndQwenRun(t *testing.T) {
	p := params("LILY_API_KEY")
	short := runWithFakes(t, byID(t, p, "opencode").Text, "LILY_API_KEY=sk test")
	if l := short["lily"].args; !slices.Equal(l, []string{"launch", "opencode"}) || len(short) != 1 {
		t.Fatalf("lily %q; ran %d commands", l, len(short))
	}
	got := runWithFakes(t, byID(t, p, "opencode-env").Text, "LILY_API_KEY=sk test")
	if _, ran := got["lily"]; ran {
		t.Fatal("the written-out setup runs lily launch too")
	}
	var oc struct {
		Provider map[string]struct {
			Options struct{ BaseURL, APIKey string }
			Models  map[string]struct{ Limit struct{ Context, Output int } }
		}
		Model string
	}
	oce := got["opencode"]
	if err := json.Unmarshal([]byte(oce.env["OPENCODE_CONFIG_CONTENT"]), &oc); err != nil {
		t.Fatal(err)
	}
	lily := oc.Provider["lily"]
	if lily.Options.BaseURL != base || lily.Options.APIKey != "sk test" || lily.Models[p.Model].Limit.Context != 131072 ||
		oc.Model != "lily/"+p.Model || !slices.Equal(oce.args, []string{"--model", "lily/" + p.Model}) {
		t.Fatalf("%+v %q", oc, oce.args)
	}
	q := runWithFakes(t, byID(t, p, "qwen-code-env").Text, "LILY_API_KEY=sk-q")["qwen"]
	if q.env["OPENAI_BASE_URL"] != base || q.env["OPENAI_API_KEY"] != "sk-q" || q.env["OPENAI_MODEL"] != p.Model ||
		!slices.Equal(q.args, []string{"--auth-type", "openai", "--model", p.Model}) {
		t.Fatalf("%+v", q)
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
	text := byID(t, params("LILY_API_KEY"), "continue").Text
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
	text := byID(t, params(""), "zed").Text
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
	s := byID(t, params(""), "open-webui")
	if !strings.Contains(s.Text, "OPENAI_API_BASE_URL=http://host.docker.internal:8000/v1") || !strings.Contains(s.Note, "OPENAI_API_BASE_URL="+base) {
		t.Fatal(s.Text, s.Note)
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
		for _, id := range []string{"claude-code", "claude-code-env", "codex", "codex-env", "opencode", "opencode-env", "qwen-code", "qwen-code-env", "open-webui", "curl"} {
			p := params(key)
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
		p := params(key)
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
	p := params("")
	p.Model = `my "model" \ id`
	if c := codexOverrides(t, p); c.Model != p.Model {
		t.Fatalf("toml: %q", c.Model)
	}
	var y struct{ Models []struct{ Model string } }
	if err := yaml.Unmarshal([]byte(byID(t, p, "continue").Text), &y); err != nil || len(y.Models) != 1 || y.Models[0].Model != p.Model {
		t.Fatalf("yaml: %+v %v", y, err)
	}
}

func TestUnknownContextUsesTheModels(t *testing.T) {
	p := params("")
	p.ContextLength = 0
	if !strings.Contains(byID(t, p, "cline").Text, "262144") {
		t.Fatal("no default context")
	}
}

// pasted runs text as if pasted into an interactive shell: macOS's stock zsh with no startup
// files (`zsh -f -i`: no interactivecomments, history expansion and globbing on) or bash, with
// stand-ins for lily (which, like `lily launch`, runs the client named after "launch"), the
// agent CLIs, docker and curl first on PATH. Each stand-in appends its name to a log. It returns
// the commands run, in order, and the shell's error output; the run is bounded to 20 s.
func pasted(t *testing.T, shell, text string, env ...string) (ran []string, stderr string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin dir") // a space in the path: the lily command is quoted
	os.Mkdir(bin, 0o755)
	logFile := filepath.Join(dir, "ran.log")
	for _, name := range []string{"lily", "claude", "codex", "opencode", "qwen", "docker", "curl"} {
		script := "#!/bin/sh\necho " + name + " >>" + launch.Quote(logFile) + "\n"
		if name == "lily" {
			script += "[ \"$1\" = launch ] && exec \"$2\"\nexit 2\n"
		}
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var cmd *exec.Cmd
	switch shell {
	case "zsh":
		cmd = exec.CommandContext(ctx, "zsh", "-f", "-i", "-o", "no_prompt_sp", "-o", "no_prompt_cr")
	case "bash":
		cmd = exec.CommandContext(ctx, "bash", "--norc", "--noprofile", "--noediting", "-i")
	}
	cmd.Stdin = strings.NewReader(text)
	cmd.Env = append([]string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + dir, "PS1=", "PS2=", "TERM=dumb"}, env...)
	var errb strings.Builder
	cmd.Stderr = &errb
	cmd.Run() // the exit status is the last command's; what counts is what ran and what was said
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish in time:\n%s", shell, text)
	}
	log, _ := os.ReadFile(logFile)
	return strings.Fields(string(log)), interactiveNoise(shell, text, errb.String())
}

// interactiveNoise drops what an interactive bash without a terminal always writes to stderr
// (no job control, its echo of the input, "exit"), leaving only what the commands caused.
func interactiveNoise(shell, text, stderr string) string {
	if shell != "bash" {
		return strings.TrimSpace(stderr)
	}
	input := map[string]bool{"exit": true, "": true}
	for _, l := range strings.Split(text, "\n") {
		input[l] = true
	}
	var kept []string
	for _, l := range strings.Split(stderr, "\n") {
		if input[l] || strings.Contains(l, "cannot set terminal process group") || strings.Contains(l, "no job control in this shell") {
			continue
		}
		kept = append(kept, l)
	}
	return strings.Join(kept, "\n")
}

// TestShellSetupsRunOnceInZshAndBash (issue 24, defect 4): every shell setup, pasted into zsh
// -f and bash with the client stubbed, starts its client exactly once (an agent's `lily launch`
// line: lily, then the client) and the shell reports no error, with and without an API key
// variable and with a model id full of shell syntax.
func TestShellSetupsRunOnceInZshAndBash(t *testing.T) {
	shells := []string{"zsh", "bash"}
	for _, sh := range shells {
		if _, err := exec.LookPath(sh); err != nil {
			t.Fatalf("%s is not installed (apt-get install -y %s): the setups must be run by it", sh, sh)
		}
	}
	// The shell-level faults the test exists to catch, shown to be caught.
	for _, sh := range shells {
		if _, stderr := pasted(t, sh, "# a comment\nclaude\n"); sh == "zsh" && !strings.Contains(stderr, "command not found: #") {
			t.Fatalf("zsh -f -i took a comment line silently: %q", stderr)
		}
		if _, stderr := pasted(t, sh, "echo \"hi!!\"\n"); sh == "zsh" && stderr == "" {
			t.Fatal("zsh -f -i: no history expansion")
		}
		if ran, _ := pasted(t, sh, "lily launch claude\nclaude\n"); len(ran) != 3 {
			t.Fatalf("%s: %q", sh, ran)
		}
	}
	for _, key := range []string{"", "LILY_API_KEY"} {
		p := params(key)
		p.Model = `it's "odd" $HOME * !!`
		p.Lily = "LILY_PLACEHOLDER"
		for _, s := range All(p) {
			if s.Kind != Shell {
				continue
			}
			want := map[string][]string{"open-webui": {"docker"}, "curl": {"curl"}}[s.ID]
			if client, ok := launchable[s.ID]; ok {
				want = []string{"lily", client}
			} else if client, ok := launchable[strings.TrimSuffix(s.ID, "-env")]; ok {
				want = []string{client}
			}
			if want == nil {
				t.Fatalf("%s: no expectation for this shell setup", s.ID)
			}
			for _, sh := range shells {
				// The lily command is the bundle's, named by path (here the stand-in's).
				text := strings.ReplaceAll(s.Text, "LILY_PLACEHOLDER", "lily")
				ran, stderr := pasted(t, sh, text, "LILY_API_KEY=sk-test")
				if !slices.Equal(ran, want) || stderr != "" {
					t.Errorf("%s in %s (key %q): ran %q, want %q; stderr %q\n%s", s.ID, sh, key, ran, want, stderr, text)
				}
			}
		}
	}
}
