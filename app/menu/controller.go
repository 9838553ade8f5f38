package menu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lilyformac/lily/app/gpulimit"
	"github.com/lilyformac/lily/app/settings"
	"github.com/lilyformac/lily/app/snippets"
	"github.com/lilyformac/lily/app/supervisor"
	"github.com/lilyformac/lily/engine/lifecycle"
)

// Platform is what the controller needs from macOS; the darwin layer implements it with AppKit,
// tests with a recorder.
type Platform interface {
	Copy(text string)           // to the general pasteboard
	Open(path string) error     // as Finder would (a .log opens in Console)
	Reveal(path string) error   // selects the file in a Finder window
	LoginItem() LoginState      // SMAppService.mainAppService status
	SetLoginItem(on bool) error // register / unregister
	OpenLoginItemsSettings()    // System Settings › General › Login Items
	About()                     // the standard About panel
	Terminate()                 // [NSApp terminate:]; the app then calls Controller.Shutdown
	// Confirm asks a question in a modal alert and reports whether the first button (ok) was
	// chosen; the download confirmation uses it.
	Confirm(title, text, ok, cancel string) bool
	// Notify posts a notification (Notification Center); Observe calls it from the supervisor's
	// goroutine, so it must not need the main thread, nor block for long.
	Notify(title, body string)
}

// Engine is the supervisor as the controller uses it.
type Engine interface {
	Start()
	Stop()
	Retry()
	Restart()
	LoadModel() // loads the model the engine unloaded for being idle
	SetOptions(supervisor.Options)
	SetMenuOpen(open bool) // the menu shows live numbers: poll fast while it is open
	Snapshot() supervisor.Snapshot
	Shutdown(ctx context.Context) error
}

// Controller connects clicks to the engine, the settings and the platform. Its methods are called
// on the main thread; Model may be called from anywhere.
type Controller struct {
	Engine       Engine
	Platform     Platform
	SettingsPath string
	LogPath      string
	Lily         string                           // the lily command the "Use with…" setups name; "": lily, on PATH
	Changed      func()                           // call when Model changed outside a snapshot (notice, login item)
	Logf         func(format string, args ...any) // the app's log
	Now          func() time.Time
	// GPULimit offers to raise macOS's GPU memory limit when the engine fails for want of it
	// (nil: never offered); the darwin layer sets gpulimit.System.
	GPULimit GPULimit
	// Predict says what context the engine will serve on this Mac before it has said so itself
	// (the app asks the bundled engine: `lily doctor`); nil or an error: unknown.
	Predict func() (int, error)
	// Other stops another Lily engine that holds the port (nil: not offered).
	Other OtherEngine
	// Translocated: macOS runs Lily from a translocated copy (menu.Input.Translocated); the menu
	// then offers to show MoveFrom (the downloaded Lily.app, or the folder it is likely in) and
	// the Applications folder in Finder. Moving it is left to the user: the app cannot know for
	// sure where the original is, nor replace itself while it runs.
	Translocated bool
	MoveFrom     string
	// Pending says what the engine would download before it can serve (the app sets
	// lifecycle.PendingDownload of the default model's directory); nil: Start never asks.
	Pending func() lifecycle.Download

	mu        sync.Mutex
	settings  settings.Settings
	notice    string
	noticeAt  time.Time
	quitting  bool
	raising   bool             // the raise's administrator prompt is open
	stopping  bool             // Other.Stop runs
	served    int              // the context the engine last reported in this run of the app
	predicted int              // Predict's answer
	seen      supervisor.State // the state Observe saw last, to notify once per transition
	reloading bool             // the engine unloaded its idle model and has not served it again yet
}

// OtherEngine stops a Lily engine this app did not start.
type OtherEngine interface {
	// Stop stops the Lily engine listening on o's port and returns once the port is free.
	Stop(o supervisor.Options) error
}

// GPULimit is what the controller needs to raise the GPU memory limit.
type GPULimit interface {
	Offer() (gpulimit.Offer, bool) // for this Mac now (false: none)
	Raise(gpulimit.Offer) error    // runs its command: one administrator prompt; blocks until answered
}

// NoticeFor is how long a notice stays in the menu.
const NoticeFor = 8 * time.Second

// NewController wires a controller; s are the settings the engine was configured with.
func NewController(e Engine, p Platform, s settings.Settings, settingsPath, logPath string) *Controller {
	return &Controller{Engine: e, Platform: p, settings: s, SettingsPath: settingsPath, LogPath: logPath}
}

// Options are the supervisor options the settings describe.
func Options(s settings.Settings) supervisor.Options {
	return supervisor.Options{Host: s.Host, Port: s.Port, ModelDir: s.ModelDir, APIKey: s.APIKey,
		IdleUnload: time.Duration(s.IdleUnloadMinutes) * time.Minute}
}

// Settings returns the current settings.
func (c *Controller) Settings() settings.Settings {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settings
}

func (c *Controller) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Controller) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

func (c *Controller) changed() {
	if c.Changed != nil {
		c.Changed()
	}
}

func (c *Controller) note(format string, args ...any) {
	c.mu.Lock()
	c.notice, c.noticeAt = fmt.Sprintf(format, args...), c.now()
	c.mu.Unlock()
	c.changed()
}

// Model builds the menu for now.
func (c *Controller) Model() Model {
	c.mu.Lock()
	notice := c.notice
	if c.now().Sub(c.noticeAt) > NoticeFor {
		notice = ""
	}
	quitting, raising, stopping, idle := c.quitting, c.raising, c.stopping, c.settings.IdleUnloadMinutes
	c.mu.Unlock()
	s := c.Engine.Snapshot()
	in := Input{Snap: s, Login: c.Platform.LoginItem(), Notice: notice, Lily: c.Lily, Quitting: quitting, Raising: raising,
		Context: c.context(s), Settings: c.SettingsPath, StoppingOther: stopping, Translocated: c.Translocated, IdleUnload: idle}
	if o, ok := c.raiseOffer(s); ok {
		in.Raise = &o
	}
	return Build(in)
}

// context is the context the engine will serve, as known before it reports its own: what it
// reported last in this run of the app (the same Mac, limit and settings), else the prediction.
func (c *Controller) context(s supervisor.Snapshot) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := s.Engine.ContextLength; n > 0 && !OtherLily(s) {
		c.served = n
	}
	if c.served > 0 {
		return c.served
	}
	return c.predicted
}

// PredictContext asks Predict, off the calling goroutine, for the context the engine will serve;
// the setups copied before the engine reports its own carry it.
func (c *Controller) PredictContext() {
	if c.Predict == nil {
		return
	}
	go func() {
		n, err := c.Predict()
		if err != nil {
			c.logf("the context the engine will serve: %v", err)
			return
		}
		c.logf("the engine will serve a context of %d tokens", n)
		c.mu.Lock()
		c.predicted = n
		c.mu.Unlock()
		c.changed()
	}()
}

// raiseOffer is the GPU limit raise to offer for s: only when the engine failed for want of
// GPU memory and this Mac's limit can be raised.
func (c *Controller) raiseOffer(s supervisor.Snapshot) (gpulimit.Offer, bool) {
	if c.GPULimit == nil || s.State != supervisor.EngineError || !gpulimit.Wanted(s.Message) {
		return gpulimit.Offer{}, false
	}
	return c.GPULimit.Offer()
}

// raise runs o's administrator prompt off the main thread; once the limit is raised the engine
// restarts, so that a fresh process sizes its memory by the new limit.
func (c *Controller) raise(o gpulimit.Offer) {
	c.mu.Lock()
	if c.raising {
		c.mu.Unlock()
		return
	}
	c.raising = true
	c.mu.Unlock()
	c.changed()
	go func() {
		err := c.GPULimit.Raise(o)
		c.mu.Lock()
		c.raising = false
		c.mu.Unlock()
		switch {
		case errors.Is(err, gpulimit.ErrCancelled):
			c.note("The GPU memory limit was not changed")
		case err != nil:
			c.logf("raising the GPU memory limit to %d MiB: %v", o.MB, err)
			c.note("The GPU memory limit could not be raised: %v", err)
		default:
			c.logf("GPU memory limit raised to %d MiB (iogpu.wired_limit_mb) until restart", o.MB)
			c.mu.Lock()
			c.served = 0 // the raised limit holds more context: the restarted engine says how much
			c.mu.Unlock()
			c.PredictContext()
			c.Engine.Restart()
			c.note("%s", o.Done)
		}
	}()
}

// Click carries out a click on item id.
func (c *Controller) Click(id ID) {
	s := c.Engine.Snapshot()
	switch id {
	case Toggle:
		if CleaningUp(s) { // the supervisor starts the engine once the leftover one has gone
			return
		}
		switch s.State {
		case supervisor.Stopped, supervisor.Failed:
			c.Start()
		case supervisor.Stopping:
		default:
			c.Engine.Stop()
		}
	case Fix:
		if o, ok := c.raiseOffer(s); ok {
			c.raise(o)
			return
		}
		switch {
		case OtherLily(s):
			c.Platform.Copy(s.BaseURL())
			c.note("Copied %s: the Lily already running there serves it", s.BaseURL())
		case s.State == supervisor.EngineError:
			c.Engine.Retry()
		case s.State == supervisor.Failed && s.Problem == supervisor.PortInUse && s.SuggestedPort != 0:
			c.usePort(s.SuggestedPort)
		case s.State == supervisor.Failed || s.State == supervisor.Restarting:
			c.Engine.Start()
		}
	case LoadModel:
		if s.State == supervisor.Ready && s.Engine.Unloaded() {
			c.Engine.LoadModel()
		}
	case StopOther:
		if OtherLily(s) {
			c.stopOther(s.Options)
		}
	case CopyError:
		if text := ErrorText(s); text != "" {
			c.Platform.Copy(text)
			c.note("Copied the error details")
		}
	case MoveToApplications:
		c.showMove()
	case CopyURL:
		c.Platform.Copy(s.BaseURL())
		c.note("Copied %s", s.BaseURL())
	case ShowSettings:
		if c.SettingsPath == "" {
			return
		}
		if err := c.Platform.Reveal(c.SettingsPath); err != nil {
			c.note("Cannot show the settings file: %v", err)
			return
		}
		c.note("settings.json is read when Lily opens: quit and reopen Lily to apply changes")
	case OpenLogs:
		path := c.LogPath
		if _, err := os.Stat(path); err != nil {
			path = filepath.Dir(path)
		}
		if err := c.Platform.Open(path); err != nil {
			c.note("Cannot open the logs: %v", err)
		}
	case LaunchAtLogin:
		c.toggleLogin()
	case About:
		c.Platform.About()
	case Quit:
		c.mu.Lock()
		c.quitting = true
		c.mu.Unlock()
		c.changed()
		c.Platform.Terminate()
	}
}

// Observe is given every snapshot the supervisor publishes; it posts a notification when the
// engine becomes ready or its startup fails, once per transition: the user has likely left a
// long download or load to run in the background, and the menu-bar icon alone is easy to miss.
// A stop the user chose, and anything while quitting, notifies nothing: they know. Nor does the
// model becoming ready again after an idle unload: a request or Load Model asked for it.
func (c *Controller) Observe(s supervisor.Snapshot) {
	c.mu.Lock()
	prev, quitting, reloaded := c.seen, c.quitting, c.reloading && s.State == supervisor.Ready
	c.seen = s.State
	c.reloading = s.State == supervisor.Ready && s.Engine.Unloaded() || s.State == supervisor.Loading && c.reloading
	c.mu.Unlock()
	title, body, ok := Notification(prev, s)
	if ok && !quitting && !reloaded {
		c.Platform.Notify(title, body)
	}
}

// Notification is what to tell the user when the supervisor goes from prev to s's state (false:
// nothing). Repeated snapshots of one state (every poll) tell nothing.
func Notification(prev supervisor.State, s supervisor.Snapshot) (title, body string, ok bool) {
	if s.State == prev {
		return "", "", false
	}
	switch s.State {
	case supervisor.Ready:
		body = Served(s.Engine)
		if body != "" {
			body += " · "
		}
		return "Lily is ready", body + s.BaseURL(), true
	case supervisor.EngineError, supervisor.Failed: // a Retry passes through Loading: a new failure tells again
		return StatusLine(s), Truncate(cmp.Or(DetailLine(s), "Open the Lily menu for details."), 200), true
	}
	return "", "", false
}

// MenuOpen tells the engine's poller that the menu opened or closed.
func (c *Controller) MenuOpen(open bool) { c.Engine.SetMenuOpen(open) }

// ApplicationsDir is where Lily.app belongs.
const ApplicationsDir = "/Applications"

// showMove reveals the downloaded Lily.app (or opens its folder) and opens Applications, for the
// user to drag it across.
func (c *Controller) showMove() {
	if !c.Translocated {
		return
	}
	var err error
	if c.MoveFrom != "" {
		if filepath.Ext(c.MoveFrom) == ".app" {
			err = c.Platform.Reveal(c.MoveFrom)
		} else {
			err = c.Platform.Open(c.MoveFrom)
		}
	}
	if err == nil {
		err = c.Platform.Open(ApplicationsDir)
	}
	if err != nil {
		c.note("Cannot open Finder: %v", err)
		return
	}
	c.note("Drag Lily into Applications, quit Lily, and open it from there")
}

// ClickSnippet copies the i-th "Use with…" setup.
func (c *Controller) ClickSnippet(i int) {
	s := c.Engine.Snapshot()
	all := snippets.All(SnippetParams(s, c.Lily, c.context(s)))
	if i < 0 || i >= len(all) {
		return
	}
	c.Platform.Copy(all[i].Text)
	c.note("Copied the %s setup", all[i].Title)
}

// ClickIdle sets Unload When Idle to IdleChoices[i] and remembers it. The engine takes it as a
// flag, so a running engine restarts to apply it, unless requests are running: then it applies
// at the next start.
func (c *Controller) ClickIdle(i int) {
	if i < 0 || i >= len(IdleChoices) {
		return
	}
	c.mu.Lock()
	c.settings.IdleUnloadMinutes = IdleChoices[i]
	st := c.settings
	c.mu.Unlock()
	if err := c.save(st); err != nil {
		c.note("Unload When Idle could not be saved: %v", err)
	}
	c.Engine.SetOptions(Options(st))
	s := c.Engine.Snapshot()
	what := "Unload When Idle: " + strings.ToLower(IdleTitle(IdleChoices[i]))
	switch {
	case !s.State.Running() || s.State == supervisor.Stopping:
		c.note("%s", what)
	case s.Engine.QueueDepth > 0:
		c.note("%s, from the next start (requests are running)", what)
	default:
		c.Engine.Restart()
		c.note("%s; restarting the engine to apply it", what)
	}
}

// stopOther stops the other Lily off the main thread, then starts this app's engine.
func (c *Controller) stopOther(o supervisor.Options) {
	c.mu.Lock()
	if c.stopping || c.Other == nil {
		c.mu.Unlock()
		if c.Other == nil {
			c.note("Quit the other Lily (Ctrl-C in its Terminal), then choose Start Server")
		}
		return
	}
	c.stopping = true
	c.mu.Unlock()
	c.note("Stopping the Lily on port %d…", o.Port)
	go func() {
		err := c.Other.Stop(o)
		if err == nil {
			c.logf("stopped the other Lily on port %d; starting", o.Port)
			c.Engine.Start()
		}
		c.mu.Lock()
		c.stopping = false
		c.mu.Unlock()
		if err != nil {
			c.logf("stopping the other Lily on port %d: %v", o.Port, err)
			c.note("The other Lily could not be stopped: %v", err)
			return
		}
		c.note("Stopped the other Lily; starting Lily here")
	}()
}

// usePort moves the engine to port, remembers it, and starts.
func (c *Controller) usePort(port int) {
	c.mu.Lock()
	c.settings.Port = port
	s := c.settings
	c.mu.Unlock()
	if err := c.save(s); err != nil {
		c.note("Port %d is used now but could not be saved: %v", port, err)
	} else {
		c.note("Lily now uses port %d", port)
	}
	c.Engine.SetOptions(Options(s))
	c.Engine.Start()
}

func (c *Controller) save(s settings.Settings) error {
	if c.SettingsPath == "" {
		return nil
	}
	err := settings.Save(c.SettingsPath, s)
	if err != nil {
		c.logf("saving settings: %v", err)
	}
	return err
}

func (c *Controller) toggleLogin() {
	switch state := c.Platform.LoginItem(); state {
	case LoginUnavailable:
		return
	case LoginNeedsApproval:
		c.Platform.OpenLoginItemsSettings()
		return
	default:
		on := state != LoginOn
		if err := c.Platform.SetLoginItem(on); err != nil {
			c.logf("launch at login → %v: %v", on, err)
			c.note("Launch at Login: %v", err)
			return
		}
		c.mu.Lock()
		c.settings.LaunchAtLogin = on
		s := c.settings
		c.mu.Unlock()
		c.save(s)
		c.changed()
	}
}

// SyncLogin records the login item's actual state in the settings (the user may have changed it
// in System Settings since the last run).
func (c *Controller) SyncLogin() {
	state := c.Platform.LoginItem()
	if state == LoginUnavailable {
		return
	}
	on := state == LoginOn || state == LoginNeedsApproval
	c.mu.Lock()
	differs := c.settings.LaunchAtLogin != on
	c.settings.LaunchAtLogin = on
	s := c.settings
	c.mu.Unlock()
	if differs {
		c.save(s)
	}
}

// Shutdown stops the engine (gracefully, then forcibly) and calls done; the app calls it when
// it is asked to terminate and replies to AppKit from done.
func (c *Controller) Shutdown(timeout time.Duration, done func()) {
	c.mu.Lock()
	c.quitting = true
	c.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := c.Engine.Shutdown(ctx); err != nil {
			c.logf("engine shutdown: %v", err)
		}
		done()
	}()
}
