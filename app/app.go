// Command Lily is Lily's macOS menu-bar app: a status item that starts, stops and watches the
// engine (`lily serve`, bundled as Lily.app/Contents/MacOS/lily), shows its state, and hands out
// its base URL and ready-to-paste client setups. The AppKit layer (darwinkit, cgo) lives in the
// *_darwin.go files; this file and the app/... packages are portable and tested on Linux.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lilyformac/lily/app/instance"
	"github.com/lilyformac/lily/app/logfile"
	"github.com/lilyformac/lily/app/menu"
	"github.com/lilyformac/lily/app/settings"
	"github.com/lilyformac/lily/app/supervisor"
	"github.com/lilyformac/lily/engine/lifecycle"
)

// paths are where the app keeps its files.
type paths struct {
	Support  string // ~/Library/Application Support/Lily
	Settings string // …/settings.json
	PIDFile  string // …/engine.pid
	Lock     string // …/app.lock: held by the running copy of the app (app/instance)
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
	p.Lock = filepath.Join(p.Support, "app.lock")
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
	lock      *instance.Lock // held until the process exits: one copy of the app at a time
	settings  settings.Settings
	sup       *supervisor.Supervisor
	ctrl      *menu.Controller
}

func (a *app) logf(format string, args ...any) {
	fmt.Fprintf(a.log, "%s app: %s\n", time.Now().Format("2006-01-02 15:04:05.000"), fmt.Sprintf(format, args...))
}

// setup takes the one-copy lock, reads the settings, opens the log and creates the supervisor and
// the menu controller. onChange is called (on the supervisor's goroutine) whenever the menu should
// be redrawn. Where another copy runs it returns an error wrapping instance.ErrRunning (an
// *instance.RunningError) before touching anything that copy owns.
func setup(env environment, platform menu.Platform, onChange func()) (*app, error) {
	a := &app{paths: appPaths(env.Home, env.GOOS)}
	var err error
	if a.lock, err = instance.Acquire(a.paths.Lock); err != nil {
		return nil, err
	}
	exeDir := filepath.Dir(env.Exe)
	a.resources = filepath.Join(exeDir, "..", "Resources")
	if dir := env.Getenv("LILY_RESOURCES"); dir != "" {
		a.resources = dir
	}
	engine := filepath.Join(exeDir, "lily")
	if bin := env.Getenv("LILY_ENGINE"); bin != "" {
		engine = bin
	}
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
		OnChange: func(s supervisor.Snapshot) {
			if a.ctrl != nil { // set below, before the supervisor starts
				a.ctrl.Observe(s)
			}
			onChange()
		},
	})
	a.ctrl = menu.NewController(a.sup, platform, a.settings, a.paths.Settings, a.paths.Log)
	a.ctrl.Logf = a.logf
	a.ctrl.Lily = engine // the setups' `lily launch` lines: Lily.app's own lily need not be on PATH
	a.ctrl.Changed = onChange
	a.ctrl.Predict = func() (int, error) { return predictContext(engine, doctorTimeout) }
	a.ctrl.Other = otherEngine{name: filepath.Base(engine), timeout: stopTimeout + 2*time.Second}
	// The engine, started with this environment, pulls into the same default directory.
	a.ctrl.Pending = func() lifecycle.Download {
		return lifecycle.PendingDownload(lifecycle.ModelDir(lifecycle.DefaultRepo))
	}
	if translocated(env.Exe) {
		a.ctrl.Translocated, a.ctrl.MoveFrom = true, downloadedApp(env.Home)
		a.logf("macOS runs Lily from a translocated copy (%s); asking to move Lily.app to /Applications", env.Exe)
	}
	return a, nil
}

// translocated reports whether exe runs from an App Translocation copy: macOS runs a quarantined
// app opened from where it was downloaded (not moved by Finder) from a random read-only mount,
// /private/var/folders/…/AppTranslocation/<UUID>/d/Lily.app, gone once it quits, so a `lily launch`
// path copied from the menu would break and the login item would point nowhere.
func translocated(exe string) bool {
	p := filepath.Clean(exe)
	if !strings.HasPrefix(p, "/private/var/folders/") && !strings.HasPrefix(p, "/var/folders/") {
		return false
	}
	return slices.Contains(strings.Split(p, string(filepath.Separator)), "AppTranslocation")
}

// downloadedApp is the best guess at the Lily.app macOS translocated: Lily.app in Downloads where
// it is there, else the Downloads folder (macOS does not say where the original is).
func downloadedApp(home string) string {
	dl := filepath.Join(home, "Downloads")
	if fi, err := os.Stat(filepath.Join(dl, "Lily.app")); err == nil && fi.IsDir() {
		return filepath.Join(dl, "Lily.app")
	}
	return dl
}

// moveAlert is what the app asks at launch when it runs translocated: the alert's title and text
// (menu.MoveNote); its buttons show the move in Finder, or leave it for later (the menu keeps
// the item).
func moveAlert() (title, text string) {
	return "Move Lily to Applications", menu.MoveNote
}

// runningAlert is what a second copy says before it exits: the running copy's pid, where its
// icon is, and how to get at it when the menu bar hides it.
func runningAlert(err error) (title, text string) {
	title = "Lily is already running"
	text = "Its lily icon is in the menu bar. If you cannot see it (behind the camera notch, or hidden by a menu-bar app), open Lily again from Applications: it then shows its status."
	var re *instance.RunningError
	if errors.As(err, &re) && re.PID > 0 {
		text += fmt.Sprintf(" (The running copy is process %d.)", re.PID)
	}
	return title, text
}

// reopenAlert is what a double-click on the running Lily shows when its menu-bar icon cannot be
// clicked for the user (hidden behind the notch or by a menu-bar manager): the menu's status and
// detail lines, and the base URL.
func reopenAlert(m menu.Model, baseURL string) (title, text string) {
	var lines []string
	for _, it := range m.Items {
		switch {
		case it.ID == menu.Status:
			title = "Lily: " + it.Tooltip
		case it.ID == menu.Detail && !it.Hidden && it.Tooltip != "":
			lines = append(lines, it.Tooltip)
		}
	}
	lines = append(lines, "Base URL: "+baseURL,
		"Lily's icon is in the menu bar, but hidden now (behind the camera notch, or by a menu-bar app). "+
			"Quitting other menu-bar apps, or Command-dragging their icons to rearrange them, makes room.")
	return title, strings.Join(lines, "\n\n")
}

// doctorTimeout bounds `lily doctor`, run once at launch to learn the context the engine will
// serve (it takes about a second: no weights are read).
const doctorTimeout = time.Minute

// predictContext asks the engine what context `lily serve` will hold on this Mac: `lily doctor
// --output json` sizes it with serve's own code and this Mac's GPU working set (menu.DoctorContext
// says why the app does not size it itself).
func predictContext(engine string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, engine, "doctor", "--output", "json")
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.Output() // doctor exits 1 when any check fails, and still reports
	if len(out) == 0 {
		if err == nil {
			err = errors.New("no output")
		}
		return 0, fmt.Errorf("%s doctor: %w", engine, err)
	}
	return menu.DoctorContext(out)
}

// otherEngine stops a Lily engine that this app did not start but that holds its port: the
// process listening there (lsof), only if it runs the engine's binary name (ps), with SIGTERM
// (lily serve then finishes its requests and exits), and waits for the port to be free.
type otherEngine struct {
	name    string        // the engine binary's name: lily
	timeout time.Duration // how long it gets to exit
}

func (e otherEngine) Stop(o supervisor.Options) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "lsof", "-nP", "-t", "-iTCP:"+strconv.Itoa(o.Port), "-sTCP:LISTEN").Output()
	if err != nil && len(out) == 0 {
		return fmt.Errorf("cannot tell which program listens on port %d (lsof: %v)", o.Port, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		name, err := exec.CommandContext(ctx, "ps", "-o", "comm=", "-p", strconv.Itoa(pid)).Output()
		if err == nil && filepath.Base(strings.TrimSpace(string(name))) == e.name {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return fmt.Errorf("no %s process listens on port %d: quit the program that does", e.name, o.Port)
	}
	for _, pid := range pids {
		if p, err := os.FindProcess(pid); err == nil {
			p.Signal(syscall.SIGTERM)
		}
	}
	for deadline := time.Now().Add(e.timeout); ; time.Sleep(50 * time.Millisecond) {
		if supervisor.CheckPort(o.Host, o.Port) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Lily on port %d (pid %d) did not stop within %s", o.Port, pids[0], e.timeout)
		}
	}
}

// aboutVersion is the version the About panel shows: the bundle's CFBundleShortVersionString
// (build.sh fills it from the last vX.Y.Z tag); where that says nothing (0.0.0: no tag, or no
// bundle) the build's git description (LilyGitDescribe in Info.plist, else the Go build's VCS
// stamp) marks it a development build.
func aboutVersion(short, describe string, bi *debug.BuildInfo) string {
	if short != "" && short != "0.0.0" {
		return short
	}
	if describe != "" && describe != "unknown" {
		return "development build " + describe
	}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return "development build " + v
		}
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return "development build " + rev
		}
	}
	return "development build"
}

// begin runs once the UI exists: it records the real login-item state and starts the engine
// if the settings say so (asking first when that would download the model: Controller.Start).
func (a *app) begin() {
	a.ctrl.SyncLogin()
	a.ctrl.PredictContext()
	if a.settings.StartOnLaunch {
		a.ctrl.Start()
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

// notifyScript is the AppleScript that posts a notification (osascript -e; darwinkit v0.5.0 has
// no UserNotifications binding). The texts become AppleScript string literals: a quote or
// backslash in an engine's error must not end the literal early and run the rest as script.
func notifyScript(title, body string) string {
	return "display notification " + appleScriptString(body) + " with title " + appleScriptString(title)
}

// appleScriptString quotes s as an AppleScript string literal: backslashes and quotes escaped,
// control characters (newlines from an error) turned to spaces, as a notification shows one line.
func appleScriptString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '\\' || r == '"':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
