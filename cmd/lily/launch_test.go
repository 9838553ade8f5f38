package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// modelsServer answers /v1/models as lily serve does; with key set, only to that bearer key.
func modelsServer(t *testing.T, key string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"message":"missing or wrong API key"}}`))
			return
		}
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`{"object":"list","data":[{"id":"Qwen-test","object":"model","context_length":65536}]}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestLaunchPrint: --print gives each client's variables and command for the server's model and
// context window.
func TestLaunchPrint(t *testing.T) {
	t.Setenv("LILY_API_KEY", "")
	srv := modelsServer(t, "")
	for client, wants := range map[string][]string{
		"claude": {"export ANTHROPIC_BASE_URL=" + srv.URL + "\n", "export ANTHROPIC_AUTH_TOKEN=lily\n", "export ANTHROPIC_API_KEY=''\n",
			"export ANTHROPIC_MODEL=Qwen-test\n", "export CLAUDE_CODE_AUTO_COMPACT_WINDOW=65536\n", "export CLAUDE_CODE_MAX_CONTEXT_TOKENS=65536\n",
			"export CLAUDE_CODE_MAX_OUTPUT_TOKENS=16384\n",
			"export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n", "claude --model Qwen-test --verbose\n"},
		"codex": {`base_url="` + srv.URL + `/v1"`, `wire_api="responses"`, `'model="Qwen-test"'`, "model_context_window=65536",
			"model_auto_compact_token_limit=58982", `'web_search="disabled"'`, "--verbose\n"},
		"opencode": {`"baseURL":"` + srv.URL + `/v1"`, `"apiKey":"lily"`, `"limit":{"context":65536,"output":16384}`,
			`"small_model":"lily/Qwen-test"`, "opencode --model lily/Qwen-test --verbose\n"},
		"qwen": {"export OPENAI_BASE_URL=" + srv.URL + "/v1\n", "export OPENAI_API_KEY=lily\n", "export OPENAI_MODEL=Qwen-test\n",
			"qwen --auth-type openai --model Qwen-test --verbose\n"},
	} {
		out, err := execute(t, "launch", client, "--url", srv.URL+"/v1", "--print", "--", "--verbose")
		if err != nil {
			t.Fatalf("%s: %v", client, err)
		}
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s: lacks %q:\n%s", client, w, out)
			}
		}
		if strings.Contains(out, "LILY_API_KEY") {
			t.Errorf("%s: names a key the server does not need:\n%s", client, out)
		}
	}
}

// fakeClient puts a stand-in for the client first on PATH: it writes its arguments and some
// variables to the returned file and exits 3.
func fakeClient(t *testing.T, name string, vars ...string) string {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	got := filepath.Join(dir, "got")
	script := "#!/bin/sh\n{\nfor a in \"$@\"; do echo \"arg $a\"; done\n"
	for _, v := range vars {
		script += "echo \"" + v + "=${" + v + "-unset}\"\n"
	}
	script += "} >'" + got + "'\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return got
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLaunchRunsTheClient: the client gets Lily's variables and arguments, the user's Anthropic
// key emptied, and lily launch ends with the client's status.
func TestLaunchRunsTheClient(t *testing.T) {
	t.Setenv("LILY_API_KEY", "")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-real")
	srv := modelsServer(t, "")
	got := fakeClient(t, "claude", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_AUTO_COMPACT_WINDOW")
	_, err := execute(t, "launch", "claude", "--url", srv.URL, "--", "-p", "hello world")
	var status exitStatus
	if !errors.As(err, &status) || status != 3 {
		t.Fatalf("err %v, want the client's status 3", err)
	}
	want := "arg --model\narg Qwen-test\narg -p\narg hello world\nANTHROPIC_BASE_URL=" + srv.URL +
		"\nANTHROPIC_API_KEY=\nANTHROPIC_AUTH_TOKEN=lily\nCLAUDE_CODE_AUTO_COMPACT_WINDOW=65536\n"
	if g := readFile(t, got); g != want {
		t.Fatalf("the client got\n%s\nwant\n%s", g, want)
	}
}

// TestLaunchExitStatusHelper is `lily launch` as a process, for TestLaunchExitsWithClientStatus.
func TestLaunchExitStatusHelper(t *testing.T) {
	if os.Getenv("LILY_LAUNCH_HELPER") == "" {
		t.Skip("run by TestLaunchExitsWithClientStatus")
	}
	os.Args = []string{"lily", "launch", "codex", "--url", os.Getenv("LILY_LAUNCH_HELPER")}
	main()
}

func TestLaunchExitsWithClientStatus(t *testing.T) {
	t.Setenv("LILY_API_KEY", "")
	srv := modelsServer(t, "")
	got := fakeClient(t, "codex", "LILY_API_KEY")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLaunchExitStatusHelper$")
	cmd.Env = append(os.Environ(), "LILY_LAUNCH_HELPER="+srv.URL)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || strings.Contains(string(out), "lily:") {
		t.Fatalf("%v %s", err, out)
	}
	if g := readFile(t, got); !strings.Contains(g, `arg model_providers.lily={name="Lily", base_url="`+srv.URL+`/v1", wire_api="responses"}`) ||
		!strings.Contains(g, "LILY_API_KEY=\n") { // no key: none made up (the test's environment has it empty)
		t.Fatalf("the client got\n%s", g)
	}
}

func TestLaunchUnknownClient(t *testing.T) {
	for _, args := range [][]string{{"launch", "cursor"}, {"launch"}} {
		_, err := execute(t, args...)
		if err == nil || !strings.Contains(err.Error(), "claude, codex, opencode, qwen") {
			t.Fatalf("%q: %v", args, err)
		}
	}
}

func TestLaunchServerDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := execute(t, "launch", "claude", "--url", url, "--print")
	if err == nil || !strings.Contains(err.Error(), "no Lily server answers at "+url) || !strings.Contains(err.Error(), "lily serve") ||
		!strings.Contains(err.Error(), "--url") {
		t.Fatalf("%v", err)
	}
}

// TestLaunchSendsTheKey: a server with a key refuses lily launch without it; --api-key and
// $LILY_API_KEY are sent, and only --api-key's key is written out by --print.
func TestLaunchSendsTheKey(t *testing.T) {
	srv := modelsServer(t, "sk-lily")
	t.Setenv("LILY_API_KEY", "")
	if _, err := execute(t, "launch", "qwen", "--url", srv.URL, "--print"); err == nil || !strings.Contains(err.Error(), "needs an API key") {
		t.Fatalf("without a key: %v", err)
	}
	if _, err := execute(t, "launch", "qwen", "--url", srv.URL, "--api-key", "wrong", "--print"); err == nil || !strings.Contains(err.Error(), "refused the API key") {
		t.Fatalf("wrong key: %v", err)
	}
	out, err := execute(t, "launch", "qwen", "--url", srv.URL, "--api-key", "sk-lily", "--print")
	if err != nil || !strings.Contains(out, "export OPENAI_API_KEY=sk-lily\n") {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Setenv("LILY_API_KEY", "sk-lily")
	out, err = execute(t, "launch", "qwen", "--url", srv.URL, "--print")
	if err != nil || !strings.Contains(out, `export OPENAI_API_KEY="$LILY_API_KEY"`+"\n") || strings.Contains(out, "sk-lily") {
		t.Fatalf("%v\n%s", err, out)
	}
	got := fakeClient(t, "qwen", "OPENAI_API_KEY")
	if _, err := execute(t, "launch", "qwen", "--url", srv.URL); !errors.Is(err, exitStatus(3)) {
		t.Fatalf("%v", err)
	}
	if g := readFile(t, got); !strings.Contains(g, "OPENAI_API_KEY=sk-lily\n") {
		t.Fatalf("the client got\n%s", g)
	}
}
