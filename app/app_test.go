package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lilyformac/lily/app/instance"
	"github.com/lilyformac/lily/app/menu"
	"github.com/lilyformac/lily/app/settings"
	"github.com/lilyformac/lily/app/supervisor"
	"github.com/lilyformac/lily/engine/lifecycle"
)

func TestPaths(t *testing.T) {
	p := appPaths("/Users/ann", "darwin")
	if p.Settings != "/Users/ann/Library/Application Support/Lily/settings.json" || p.Log != "/Users/ann/Library/Logs/Lily/lily.log" ||
		p.PIDFile != "/Users/ann/Library/Application Support/Lily/engine.pid" || p.Lock != "/Users/ann/Library/Application Support/Lily/app.lock" {
		t.Fatalf("%+v", p)
	}
	if p := appPaths("/home/ann", "linux"); !strings.HasPrefix(p.Settings, "/home/ann/.config/") {
		t.Fatalf("%+v", p)
	}
}

type nopPlatform struct{}

func (nopPlatform) Copy(string)                                 {}
func (nopPlatform) Open(string) error                           { return nil }
func (nopPlatform) Reveal(string) error                         { return nil }
func (nopPlatform) LoginItem() menu.LoginState                  { return menu.LoginOff }
func (nopPlatform) SetLoginItem(bool) error                     { return nil }
func (nopPlatform) OpenLoginItemsSettings()                     {}
func (nopPlatform) About()                                      {}
func (nopPlatform) Terminate()                                  {}
func (nopPlatform) Confirm(string, string, string, string) bool { return true }
func (nopPlatform) Notify(string, string)                       {}

// TestSetupInABundleLayout builds the Lily.app layout in a temporary directory: the engine path
// and default settings come from the bundle, the user's settings override them, and a missing
// engine is reported in the menu.
func TestSetupInABundleLayout(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	contents := filepath.Join(root, "Lily.app", "Contents")
	os.MkdirAll(filepath.Join(contents, "MacOS"), 0o755)
	os.MkdirAll(filepath.Join(contents, "Resources"), 0o755)
	data, err := os.ReadFile(filepath.Join("..", "resources", "default-settings.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(contents, "Resources", "default-settings.json"), data, 0o644)
	user := settings.Defaults()
	user.Port = 8123
	if err := settings.Save(appPaths(home, "darwin").Settings, user); err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int32
	env := environment{Home: home, GOOS: "darwin", Exe: filepath.Join(contents, "MacOS", "Lily"), Getenv: func(string) string { return "" }}
	a, err := setup(env, nopPlatform{}, func() { changes.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		a.sup.Shutdown(context.Background())
		a.log.Close()
	}()
	if a.settings.Port != 8123 || a.settings.Host != "127.0.0.1" {
		t.Fatalf("%+v", a.settings)
	}
	if got := a.sup.Snapshot().BaseURL(); got != "http://127.0.0.1:8123/v1" {
		t.Fatal(got)
	}
	if a.ctrl.Lily != filepath.Join(contents, "MacOS", "lily") { // the setups' `lily launch` lines
		t.Fatal(a.ctrl.Lily)
	}
	// Starting asks before a download into the directory the engine pulls into by default.
	if a.ctrl.Pending == nil || a.ctrl.Pending().Dir != lifecycle.ModelDir(lifecycle.DefaultRepo) {
		t.Fatal("the controller does not look where the engine downloads the model")
	}
	a.begin() // start_on_launch: the engine (missing here) is started (nopPlatform confirms the download)
	deadline := time.Now().Add(5 * time.Second)
	for a.sup.Snapshot().State != supervisor.Failed {
		if time.Now().After(deadline) {
			t.Fatalf("%+v", a.sup.Snapshot())
		}
		time.Sleep(5 * time.Millisecond)
	}
	m := a.ctrl.Model()
	if m.Icon != menu.IconError || m.Items[0].Title != "The engine cannot start" ||
		!strings.Contains(m.Items[1].Tooltip, filepath.Join(contents, "MacOS", "lily")) {
		t.Fatalf("%+v", m.Items[:2])
	}
	if changes.Load() == 0 {
		t.Fatal("the UI was never told to redraw")
	}
	log, _ := os.ReadFile(filepath.Join(home, "Library", "Logs", "Lily", "lily.log"))
	if strings.Contains(string(log), "settings:") {
		t.Fatalf("settings problems logged:\n%s", log)
	}
	if !strings.Contains(string(log), "app: Lily app starting") || !strings.Contains(string(log), "supervisor: failed: The engine binary is missing") {
		t.Fatalf("log:\n%s", log)
	}
}

// bundledEnv is a Mac home with Lily.app in it, the repository's resources standing in for the
// bundle's.
func bundledEnv(home string) environment {
	return environment{Home: home, GOOS: "darwin", Exe: filepath.Join(home, "Lily.app", "Contents", "MacOS", "LilyApp"),
		Getenv: func(k string) string {
			if k == "LILY_RESOURCES" {
				return filepath.Join("..", "resources")
			}
			return ""
		}}
}

// TestFirstRunWritesSettings: without settings.json the defaults are written, for the user to edit.
func TestFirstRunWritesSettings(t *testing.T) {
	home := t.TempDir()
	env := bundledEnv(home)
	a, err := setup(env, nopPlatform{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		a.sup.Shutdown(context.Background())
		a.log.Close()
	}()
	s, err := settings.Load(appPaths(home, "darwin").Settings, settings.Settings{})
	if err != nil || s != settings.Defaults() {
		t.Fatalf("%+v %v", s, err)
	}
}

// TestMain lets the test binary stand in for a listening engine: with LILY_APP_TEST_LISTEN set it
// listens on a free loopback port, prints it, and exits 0 on SIGTERM (or after a minute).
func TestMain(m *testing.M) {
	if os.Getenv("LILY_APP_TEST_LISTEN") != "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.Exit(3)
		}
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		select {
		case <-sig:
			os.Exit(0)
		case <-time.After(time.Minute):
			os.Exit(4)
		}
	}
	os.Exit(m.Run())
}

// listener starts a copy of the test binary named name that listens on a loopback port, and
// returns the port and its process; it is killed when the test ends.
func listener(t *testing.T, name string) (int, *exec.Cmd) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LILY_APP_TEST_LISTEN=1")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(l)
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		port, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("listener said %q", l)
		}
		return port, cmd
	case <-time.After(20 * time.Second):
		t.Fatal("the listener did not start")
	}
	return 0, nil
}

// TestStopOtherLily (issue 24, defect 2): "Stop It and Start Lily Here" stops the process that
// listens on the port when it is a lily, and waits for the port to be free; any other program
// there is left alone.
func TestStopOtherLily(t *testing.T) {
	for _, tool := range []string{"lsof", "ps"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	stop := otherEngine{name: "lily", timeout: 10 * time.Second}
	port, other := listener(t, "notlily")
	if err := stop.Stop(supervisor.Options{Host: "127.0.0.1", Port: port}); err == nil || !strings.Contains(err.Error(), "no lily process") {
		t.Fatalf("stopped another program: %v", err)
	}
	if other.ProcessState != nil || other.Process.Signal(syscall.Signal(0)) != nil {
		t.Fatal("the other program is gone")
	}
	port, lily := listener(t, "lily")
	exited := make(chan error, 1)
	go func() { exited <- lily.Wait() }()
	if err := stop.Stop(supervisor.Options{Host: "127.0.0.1", Port: port}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("lily exited with %v, not by SIGTERM's clean exit", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("lily still runs")
	}
	if err := supervisor.CheckPort("127.0.0.1", port); err != nil {
		t.Fatalf("port %d: %v", port, err)
	}
}

// TestPredictContext: the context comes from the engine's `lily doctor --output json`, whatever
// its exit status; a doctor that hangs is cut off.
func TestPredictContext(t *testing.T) {
	dir := t.TempDir()
	doctor := `{"ok":false,"checks":[{"name":"gpu-memory","status":"fail","detail":"x"},` +
		`{"name":"context","status":"warn","detail":"lily serve holds 121088 positions: 3 sequences at once"}],` +
		`"serving":{"working_set_bytes":22548578304,"kv_bits":16,"context":121088,"parallel":3}}`
	fake := filepath.Join(dir, "lily")
	os.WriteFile(fake, []byte("#!/bin/sh\n[ \"$*\" = 'doctor --output json' ] || exit 9\necho '"+doctor+"'\nexit 1\n"), 0o755)
	if n, err := predictContext(fake, 20*time.Second); err != nil || n != 121088 {
		t.Fatalf("%d, %v", n, err)
	}
	hang := filepath.Join(dir, "hang")
	os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755)
	start := time.Now()
	if _, err := predictContext(hang, 300*time.Millisecond); err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("%v after %s", err, time.Since(start))
	}
	if _, err := predictContext(filepath.Join(dir, "missing"), time.Second); err == nil {
		t.Fatal("a missing engine predicted a context")
	}
}

// TestAboutVersion (issue 24, defect 7): the About panel shows the bundle's version, and a build
// without a release tag says it is a development build and which, never 0.0.0.
func TestAboutVersion(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "8b2dfe0a1b2c3d4e5f"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		short, describe string
		bi              *debug.BuildInfo
		want            string
	}{
		{"1.2.0", "v1.2.0-3-gabc", bi, "1.2.0"},
		{"0.0.0", "8b2dfe0-dirty", bi, "development build 8b2dfe0-dirty"},
		{"0.0.0", "unknown", bi, "development build 8b2dfe0a1b2c-dirty"},
		{"", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}}, "development build v0.3.1"},
		{"", "", nil, "development build"},
	} {
		if got := aboutVersion(tc.short, tc.describe, tc.bi); got != tc.want || strings.Contains(got, "0.0.0") {
			t.Errorf("%q %q: %q, want %q", tc.short, tc.describe, got, tc.want)
		}
	}
}

// TestTranslocated (issue 24, defect 8): the App Translocation mount macOS runs a downloaded,
// unmoved app from is told apart from every place a moved or developer-run Lily can live.
func TestTranslocated(t *testing.T) {
	for exe, want := range map[string]bool{
		"/private/var/folders/7x/k2l3mn_x4f5g6h7j8k9l0m1n0000gn/T/AppTranslocation/5E1C2A9B-0D4F-4C5E-9A1B-2C3D4E5F6A7B/d/Lily.app/Contents/MacOS/LilyApp": true,
		"/var/folders/7x/abc/T/AppTranslocation/5E1C2A9B/d/Lily.app/Contents/MacOS/LilyApp":                                                                true,
		"/Applications/Lily.app/Contents/MacOS/LilyApp":                                                                                                    false,
		"/Users/ann/Downloads/Lily.app/Contents/MacOS/LilyApp":                                                                                             false, // not translocated (e.g. quarantine cleared)
		"/Users/ann/AppTranslocation/Lily.app/Contents/MacOS/LilyApp":                                                                                      false, // the name alone is not the mount
		"/private/var/folders/7x/abc/T/go-build123/b001/exe/app":                                                                                           false, // go run
		"/private/var/folders/7x/abc/T/NotAppTranslocation/d/Lily.app/x/y/z":                                                                               false,
	} {
		if got := translocated(exe); got != want {
			t.Errorf("%s: %v, want %v", exe, got, want)
		}
	}
	home := t.TempDir()
	if got := downloadedApp(home); got != filepath.Join(home, "Downloads") {
		t.Errorf("no Lily.app in Downloads: %q, want the folder", got)
	}
	os.MkdirAll(filepath.Join(home, "Downloads", "Lily.app"), 0o755)
	if got := downloadedApp(home); got != filepath.Join(home, "Downloads", "Lily.app") {
		t.Errorf("%q, want Downloads/Lily.app", got)
	}
}

// TestSetupTranslocatedOffersTheMove: setup from a translocated path turns on the menu's move
// item, which points at the Downloads folder, and the launch alert says why.
func TestSetupTranslocatedOffersTheMove(t *testing.T) {
	home := t.TempDir()
	env := environment{Home: home, GOOS: "darwin", Exe: "/private/var/folders/7x/abc/T/AppTranslocation/5E1C/d/Lily.app/Contents/MacOS/LilyApp",
		Getenv: func(k string) string {
			if k == "LILY_RESOURCES" {
				return filepath.Join("..", "resources")
			}
			return ""
		}}
	a, err := setup(env, nopPlatform{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		a.sup.Shutdown(context.Background())
		a.log.Close()
	}()
	if !a.ctrl.Translocated || a.ctrl.MoveFrom != filepath.Join(home, "Downloads") {
		t.Fatalf("translocated %v, move from %q", a.ctrl.Translocated, a.ctrl.MoveFrom)
	}
	for _, it := range a.ctrl.Model().Items {
		if it.ID == menu.MoveToApplications && it.Hidden {
			t.Fatal("the move item is hidden")
		}
	}
	if title, text := moveAlert(); !strings.Contains(title, "Applications") || !strings.Contains(text, "Drag Lily into the Applications folder") {
		t.Fatalf("%q %q", title, text)
	}
}

// TestSecondCopyRefused (issue 24, defect 8): while one app runs, a second setup with the same
// home fails with instance.ErrRunning naming the first's pid, and writes nothing of its own (no
// log line); its alert says Lily is already running.
func TestSecondCopyRefused(t *testing.T) {
	home := t.TempDir()
	env := bundledEnv(home)
	a, err := setup(env, nopPlatform{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		a.sup.Shutdown(context.Background())
		a.log.Close()
	}()
	logPath := appPaths(home, "darwin").Log
	before, _ := os.ReadFile(logPath)
	b, err := setup(env, nopPlatform{}, func() {})
	if !errors.Is(err, instance.ErrRunning) || b != nil {
		t.Fatalf("second copy: %v", err)
	}
	if after, _ := os.ReadFile(logPath); len(after) != len(before) {
		t.Fatalf("the second copy wrote to the first's log:\n%s", after[len(before):])
	}
	title, text := runningAlert(err)
	if title != "Lily is already running" || !strings.Contains(text, fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("%q %q", title, text)
	}
	a.lock.Release() // the first copy quits: the next one runs
	c, err := setup(env, nopPlatform{}, func() {})
	if err != nil {
		t.Fatalf("after the first copy quit: %v", err)
	}
	c.sup.Shutdown(context.Background())
	c.log.Close()
}

// TestReopenAlert: a double-click while the icon is hidden shows the menu's status, its detail
// and the base URL.
func TestReopenAlert(t *testing.T) {
	snap := supervisor.Snapshot{State: supervisor.Failed, Problem: supervisor.CannotRun, Message: "The engine binary is missing (/x/lily).",
		Options: supervisor.Options{Host: "127.0.0.1", Port: 8000}}
	m := menu.Build(menu.Input{Snap: snap})
	title, text := reopenAlert(m, snap.BaseURL())
	if title != "Lily: The engine cannot start" || !strings.Contains(text, "The engine binary is missing (/x/lily).") ||
		!strings.Contains(text, "Base URL: http://127.0.0.1:8000/v1") || !strings.Contains(text, "notch") {
		t.Fatalf("%q\n%s", title, text)
	}
	snap = supervisor.Snapshot{State: supervisor.Stopped, Options: snap.Options}
	if _, text := reopenAlert(menu.Build(menu.Input{Snap: snap}), snap.BaseURL()); !strings.HasPrefix(text, "Base URL:") {
		t.Fatalf("a hidden detail line was shown:\n%s", text)
	}
}

// An engine's error may hold quotes, backslashes and newlines: each must stay inside the
// AppleScript string literal, or osascript would fail (or run the rest as script).
func TestNotifyScriptEscapes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Lily is ready", `"Lily is ready"`},
		{`say "hi"`, `"say \"hi\""`},
		{`C:\path\`, `"C:\\path\\"`},
		{"line one\nline two\ttab", `"line one line two tab"`},
		{`" & (do shell script "rm -rf ~") & "`, `"\" & (do shell script \"rm -rf ~\") & \""`},
		{"Qwen3.6 · 121,088-token context — ✓", `"Qwen3.6 · 121,088-token context — ✓"`},
	} {
		if got := appleScriptString(tc.in); got != tc.want {
			t.Errorf("appleScriptString(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got, want := notifyScript(`Startup "failed"`, "out of\nmemory"), `display notification "out of memory" with title "Startup \"failed\""`; got != want {
		t.Errorf("notifyScript = %s, want %s", got, want)
	}
}
