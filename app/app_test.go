package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lilyformac/lily/app/menu"
	"github.com/lilyformac/lily/app/settings"
	"github.com/lilyformac/lily/app/supervisor"
)

func TestPaths(t *testing.T) {
	p := appPaths("/Users/ann", "darwin")
	if p.Settings != "/Users/ann/Library/Application Support/Lily/settings.json" || p.Log != "/Users/ann/Library/Logs/Lily/lily.log" ||
		p.PIDFile != "/Users/ann/Library/Application Support/Lily/engine.pid" {
		t.Fatalf("%+v", p)
	}
	if p := appPaths("/home/ann", "linux"); !strings.HasPrefix(p.Settings, "/home/ann/.config/") {
		t.Fatalf("%+v", p)
	}
}

type nopPlatform struct{}

func (nopPlatform) Copy(string)                {}
func (nopPlatform) Open(string) error          { return nil }
func (nopPlatform) LoginItem() menu.LoginState { return menu.LoginOff }
func (nopPlatform) SetLoginItem(bool) error    { return nil }
func (nopPlatform) OpenLoginItemsSettings()    {}
func (nopPlatform) About()                     {}
func (nopPlatform) Terminate()                 {}

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
	a.begin() // start_on_launch: the engine (missing here) is started
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

// TestFirstRunWritesSettings: without settings.json the defaults are written, for the user to edit.
func TestFirstRunWritesSettings(t *testing.T) {
	home := t.TempDir()
	env := environment{Home: home, GOOS: "darwin", Exe: filepath.Join(home, "Lily.app", "Contents", "MacOS", "LilyApp"),
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
	s, err := settings.Load(appPaths(home, "darwin").Settings, settings.Settings{})
	if err != nil || s != settings.Defaults() {
		t.Fatalf("%+v %v", s, err)
	}
}
