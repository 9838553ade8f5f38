package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeClient puts an executable named like the client first on PATH; it writes its arguments and
// the setup's variables, NUL-separated, to the returned file, then runs tail (e.g. "exit 3").
func fakeClient(t *testing.T, s Setup, tail string) string {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	got := filepath.Join(dir, "got")
	var b strings.Builder
	b.WriteString("#!/bin/sh\nout=" + Quote(got) + "\n: >\"$out\"\n")
	b.WriteString(`for a in "$@"; do printf 'arg %s\0' "$a" >>"$out"; done` + "\n")
	for _, v := range s.Env {
		b.WriteString("printf 'env " + v.Name + "=%s\\0' \"${" + v.Name + "-unset}\" >>\"$out\"\n")
	}
	b.WriteString(tail + "\n")
	if err := os.WriteFile(filepath.Join(dir, s.Client.Name), []byte(b.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return got
}

// want is what the fake client should write for s.
func want(s Setup) []string {
	var w []string
	for _, a := range s.Args {
		w = append(w, "arg "+a)
	}
	for _, v := range s.Env {
		w = append(w, "env "+v.Name+"="+v.Value)
	}
	return w
}

func readGot(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
}

// odd are targets whose values need every kind of quoting: in shell words, TOML and JSON.
var odd = []Target{
	{URL: "http://127.0.0.1:8000", Model: `it's "odd" $HOME \ x`, Context: 131072, Key: `k'e"y $1`},
	{URL: "http://127.0.0.1:8001", Model: "plain", Context: 40000, Key: "sk live $x", KeyEnv: "LILY_API_KEY"},
	{URL: "http://[::1]:9000", Model: "m\nnewline"},
}

// TestShellLinesDoWhatRunDoes runs each setup's shell lines with sh and checks that the client
// gets exactly the arguments and variables Run would give it.
func TestShellLinesDoWhatRunDoes(t *testing.T) {
	for _, name := range Names() {
		c, _ := Lookup(name)
		for _, tg := range odd {
			s := c.Setup(tg, "--extra", "it's")
			got := fakeClient(t, s, "exit 0")
			cmd := exec.Command("sh", "-c", s.Shell())
			cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=real-key", "LILY_API_KEY="+tg.Key)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v %s\n%s", name, err, out, s.Shell())
			}
			if g, w := readGot(t, got), want(s); !slices.Equal(g, w) {
				t.Errorf("%s %q: shell lines gave\n%q\nwant\n%q\n%s", name, tg.Model, g, w, s.Shell())
			}
		}
	}
}

// TestRunPassesEnvArgsAndStatus runs the client as `lily launch` does.
func TestRunPassesEnvArgsAndStatus(t *testing.T) {
	c, _ := Lookup("qwen")
	s := c.Setup(odd[0], "-p", "hi")
	got := fakeClient(t, s, "exit 7")
	t.Setenv("OPENAI_API_KEY", "a real key the setup replaces")
	status, err := s.Run(Stdio{})
	if err != nil || status != 7 {
		t.Fatalf("status %d, %v", status, err)
	}
	if g, w := readGot(t, got), want(s); !slices.Equal(g, w) {
		t.Fatalf("got %q\nwant %q", g, w)
	}
	fakeClient(t, s, `kill -TERM $$`)
	if status, err := s.Run(Stdio{}); err != nil || status != 128+15 {
		t.Fatalf("killed client: status %d, %v", status, err)
	}
}

func TestRunNamesThePackageOfAMissingClient(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	c, _ := Lookup("opencode")
	_, err := c.Setup(odd[1]).Run(Stdio{})
	if err == nil || !strings.Contains(err.Error(), "npm install -g opencode-ai") {
		t.Fatalf("%v", err)
	}
}

func TestRootURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000":      "http://127.0.0.1:8000",
		"http://127.0.0.1:8000/":     "http://127.0.0.1:8000",
		"http://127.0.0.1:8000/v1":   "http://127.0.0.1:8000",
		"http://127.0.0.1:8000/v1/ ": "http://127.0.0.1:8000",
		"localhost:9000":             "http://localhost:9000",
		"https://lily.example/v1":    "https://lily.example",
	} {
		if got := RootURL(in); got != want {
			t.Errorf("RootURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEnvironReplaces(t *testing.T) {
	c, _ := Lookup("claude")
	env := c.Setup(odd[0]).Environ([]string{"ANTHROPIC_API_KEY=real", "HOME=/h", "ANTHROPIC_MODEL=claude-x"})
	if !slices.Contains(env, "HOME=/h") || !slices.Contains(env, "ANTHROPIC_API_KEY=") || slices.Contains(env, "ANTHROPIC_API_KEY=real") ||
		slices.Contains(env, "ANTHROPIC_MODEL=claude-x") {
		t.Fatalf("%q", env)
	}
}

// TestKeyStaysAReference: with KeyEnv, no shell line carries the key itself.
func TestKeyStaysAReference(t *testing.T) {
	for _, name := range Names() {
		c, _ := Lookup(name)
		text := c.Setup(Target{URL: DefaultURL, Model: "m", Key: "sekret", KeyEnv: "LILY_API_KEY"}).Shell()
		if strings.Contains(text, "sekret") || !strings.Contains(text, "LILY_API_KEY") {
			t.Errorf("%s:\n%s", name, text)
		}
	}
}
