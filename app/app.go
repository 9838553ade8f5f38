// Command Lily is Lily's macOS menu-bar app: a status item that starts, stops and watches the
// engine (`lily serve`, bundled as Lily.app/Contents/MacOS/lily), shows its state, and hands out
// its base URL and ready-to-paste client setups. The AppKit layer (darwinkit, cgo) lives in the
// *_darwin.go files; this file and the app/... packages are portable and tested on Linux.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lilyformac/lily/app/logfile"
	"github.com/lilyformac/lily/app/menu"
	"github.com/lilyformac/lily/app/settings"
	"github.com/lilyformac/lily/app/supervisor"
)

// paths are where the app keeps its files.
type paths struct {
	Support  string // ~/Library/Application Support/Lily
	Settings string // …/settings.json
	PIDFile  string // …/engine.pid
	Logs     string // ~/Library/Logs/Lily
	Log      string // …/lily.log (the app's and the engine's output)
}

// appPaths follows macOS conventions on darwin, and XDG-style dot directories elsewhere (for the
// console mode used in development).
func appPaths(home, goos string) paths {
	var p paths
	if goos == "darwin" {
		p.Support = filepath.Join(home, "Library", "Application Support", "Lily")
		p.Logs = filepath.Join(home, "Library", "Logs", "Lily")
	} else {
		p.Support = filepath.Join(home, ".config", "lily-app")
		p.Logs = filepath.Join(home, ".local", "state", "lily-app")
	}
	p.Settings = filepath.Join(p.Support, "settings.json")
	p.PIDFile = filepath.Join(p.Support, "engine.pid")
	p.Log = filepath.Join(p.Logs, "lily.log")
	return p
}

// environment is what setup reads from the process, so tests can supply their own.
type environment struct {
	Home   string
	GOOS   string
	Exe    string              // the app's executable (…/Lily.app/Contents/MacOS/Lily)
	Getenv func(string) string // LILY_ENGINE, LILY_RESOURCES override the bundle layout (development)
}

// Log rotation: 10 MB per file, three old files kept.
const (
	logMaxBytes = 10 << 20
	logKeep     = 3
)

// stopTimeout is how long the engine gets to exit after SIGTERM before SIGKILL.
const stopTimeout = 10 * time.Second

// app is the portable part of the running app.
type app struct {
	paths     paths
	resources string // the bundle's Resources (icons, default-settings.json)
	log       *logfile.Writer
	settings  settings.Settings
	sup       *supervisor.Supervisor
	ctrl      *menu.Controller
}

func (a *app) logf(format string, args ...any) {
	fmt.Fprintf(a.log, "%s app: %s\n", time.Now().Format("2006-01-02 15:04:05.000"), fmt.Sprintf(format, args...))
}

// setup reads the settings, opens the log and creates the supervisor and the menu controller.
// onChange is called (on the supervisor's goroutine) whenever the menu should be redrawn.
func setup(env environment, platform menu.Platform, onChange func()) (*app, error) {
	a := &app{paths: appPaths(env.Home, env.GOOS)}
	exeDir := filepath.Dir(env.Exe)
	a.resources = filepath.Join(exeDir, "..", "Resources")
	if dir := env.Getenv("LILY_RESOURCES"); dir != "" {
		a.resources = dir
	}
	engine := filepath.Join(exeDir, "lily")
	if bin := env.Getenv("LILY_ENGINE"); bin != "" {
		engine = bin
	}
	var err error
	if a.log, err = logfile.Open(a.paths.Log, logMaxBytes, logKeep); err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	a.logf("Lily app starting (%s); engine %s", env.Exe, engine)
	defaults, err := settings.LoadDefaults(filepath.Join(a.resources, "default-settings.json"))
	if err != nil {
		a.logf("default settings: %v (using the built-in ones)", err)
	}
	if a.settings, err = settings.Load(a.paths.Settings, defaults); err != nil {
		a.logf("settings: %v", err)
	}
	if _, err := os.Stat(a.paths.Settings); os.IsNotExist(err) {
		// A first run writes the file, so there is one to edit (host, port, model_dir, api_key).
		if err := settings.Save(a.paths.Settings, a.settings); err != nil {
			a.logf("settings: %v", err)
		}
	}
	a.sup = supervisor.New(supervisor.Config{
		Engine:      engine,
		Options:     menu.Options(a.settings),
		Log:         a.log,
		PIDFile:     a.paths.PIDFile,
		StopTimeout: stopTimeout,
		OnChange:    func(supervisor.Snapshot) { onChange() },
	})
	a.ctrl = menu.NewController(a.sup, platform, a.settings, a.paths.Settings, a.paths.Log)
	a.ctrl.Logf = a.logf
	a.ctrl.Lily = engine // the setups' `lily launch` lines: Lily.app's own lily need not be on PATH
	a.ctrl.Changed = onChange
	return a, nil
}

// begin runs once the UI exists: it records the real login-item state and starts the engine
// if the settings say so.
func (a *app) begin() {
	a.ctrl.SyncLogin()
	if a.settings.StartOnLaunch {
		a.sup.Start()
	}
}

func defaultEnvironment(goos string) environment {
	home, _ := os.UserHomeDir()
	exe, err := os.Executable()
	if err == nil {
		if resolved, rerr := filepath.EvalSymlinks(exe); rerr == nil {
			exe = resolved
		}
	}
	return environment{Home: home, GOOS: goos, Exe: exe, Getenv: os.Getenv}
}
