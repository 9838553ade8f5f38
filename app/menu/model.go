// Package menu is the menu-bar app's menu without AppKit: Build turns the supervisor's snapshot
// into the status icon and the items' titles and states, and Controller carries out what a
// click means and decides when to notify (ready, startup failed). The darwin layer only mirrors
// a Model onto NSMenuItems, forwards clicks and posts the notifications.
package menu

import (
	"cmp"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lilyformac/lily/app/gpulimit"
	"github.com/lilyformac/lily/app/snippets"
	"github.com/lilyformac/lily/app/supervisor"
)

// Icon is the status item's image: status-<Name>.png in the bundle's Resources.
type Icon int

const (
	IconOff     Icon = iota // hollow lily: stopped
	IconWorking             // half-filled: starting, loading, stopping, restarting
	IconReady               // filled: serving
	IconError               // with a badge: needs the user
)

// Name is the icon's file-name part.
func (i Icon) Name() string { return [...]string{"off", "working", "ready", "error"}[i] }

// Description is the icon's accessibility description, which VoiceOver reads for the status
// item (Model.Description says the state in full).
func (i Icon) Description() string {
	return [...]string{"Lily: off", "Lily: working", "Lily: ready", "Lily: needs attention"}[i]
}

// ID names a menu item; the darwin layer creates one NSMenuItem per ID, once.
type ID int

const (
	Status             ID = iota // the state in words (disabled)
	Detail                       // a second line: file, error, notice (disabled, hidden when empty)
	Toggle                       // Start Server / Stop Server: the engine only; Lily stays in the menu bar
	Fix                          // what resolves the current problem: Retry, Use Port N, Use the Running Lily, Try Again, Restart Now
	StopOther                    // another Lily serves the port: stop it and start this one
	CopyError                    // copies the whole error (Detail shows only its start)
	MoveToApplications           // shown when macOS runs Lily from a translocated copy: shows where to move it
	CopyURL                      // copies the base URL
	UseWith                      // the "Use with…" submenu (Model.Snippets)
	OpenLogs                     // opens ~/Library/Logs/Lily/lily.log
	ShowSettings                 // reveals settings.json in Finder
	LaunchAtLogin                // checkmark; SMAppService
	About                        // the standard About panel
	Quit                         // stops the engine, then quits the app
	Separator                    // a separator line (no action)
	LoadModel                    // loads the model the engine unloaded for being idle
	UnloadWhenIdle               // the "Unload When Idle" submenu (Model.IdleChoices)
)

// LoginState is the login item's state as SMAppService reports it.
type LoginState int

const (
	LoginUnavailable   LoginState = iota // not in an app bundle (the app needs macOS 15)
	LoginOff                             // not registered
	LoginOn                              // registered and enabled
	LoginNeedsApproval                   // registered, but switched off in System Settings › Login Items
)

// Item is one menu line.
type Item struct {
	ID      ID
	Title   string
	Tooltip string
	Key     string // key equivalent, e.g. "q"
	Enabled bool
	Hidden  bool
	Checked bool
}

// Model is the whole menu at one moment. Items always has the same IDs in the same order;
// only titles and flags change.
type Model struct {
	Icon        Icon
	Description string // the status item's accessibility description: the state, for VoiceOver
	Tooltip     string // the status item's
	Items       []Item
	Snippets    []Item // the Use with… submenu, in snippets.All order
	IdleChoices []Item // the Unload When Idle submenu, in IdleChoices order
}

// IdleChoices are the Unload When Idle submenu's choices, in minutes (0: never).
var IdleChoices = []int{0, 15, 60}

// IdleTitle names an idle choice: "Never", "After 15 Minutes", "After 1 Hour".
func IdleTitle(minutes int) string {
	switch {
	case minutes <= 0:
		return "Never"
	case minutes == 60:
		return "After 1 Hour"
	case minutes%60 == 0:
		return fmt.Sprintf("After %d Hours", minutes/60)
	}
	return fmt.Sprintf("After %d Minutes", minutes)
}

// UnloadedLine is the status line while the engine has unloaded its idle model.
const UnloadedLine = "Model unloaded to free memory — loads on the next request"

// Input is what Build reads.
type Input struct {
	Snap     supervisor.Snapshot
	Login    LoginState
	Notice   string // a short note about the last action ("Copied …"); replaces Detail
	Lily     string // the lily command the "Use with…" setups name (the bundled engine)
	Quitting bool
	// Raise, when the engine fails for want of GPU memory (gpulimit.Wanted), offers to raise
	// macOS's limit in place of Retry; Raising while its administrator prompt is open.
	Raise   *gpulimit.Offer
	Raising bool
	// Context is the context the engine will serve on this Mac, as the app knows it before the
	// engine reports its own (0: unknown); see SnippetParams.
	Context int
	// Settings is settings.json's path, for the item that reveals it.
	Settings string
	// StoppingOther while the other Lily on the port is being stopped.
	StoppingOther bool
	// Translocated when macOS runs Lily.app from a temporary read-only copy (App Translocation:
	// opened from Downloads without being moved), whose path the setups' `lily launch` lines
	// would name and which disappears when Lily quits.
	Translocated bool
	// IdleUnload is the Unload When Idle setting in minutes (0: never).
	IdleUnload int
}

// DefaultModelID is the id `lily serve` reports for its default checkpoint
// (…/mlx-community/Qwen3.6-35B-A3B-4bit): the directory's name.
const DefaultModelID = "Qwen3.6-35B-A3B-4bit"

// ModelID is the model id clients should send: the running engine's, else what it will report.
func ModelID(s supervisor.Snapshot) string {
	switch {
	case s.Engine.Model != "":
		return s.Engine.Model
	case s.Options.ModelDir != "":
		return filepath.Base(filepath.Clean(s.Options.ModelDir))
	}
	return DefaultModelID
}

// SnippetParams are the "Use with…" texts' inputs for a snapshot; lily is the lily command they
// name ("": lily, on PATH); served is the context the engine will serve when it has not said
// its own yet (0: unknown). A running engine's own answer comes first, since it is what it serves.
func SnippetParams(s supervisor.Snapshot, lily string, served int) snippets.Params {
	p := snippets.Params{BaseURL: s.BaseURL(), Model: ModelID(s), ContextLength: cmp.Or(s.Engine.ContextLength, served), Lily: lily}
	if s.Options.APIKey != "" {
		p.KeyEnv = supervisor.KeyEnv
	}
	return p
}

// OtherLily reports a port held by another Lily engine (one this app did not start): the menu
// then offers to use it or to stop it, never another port, which would load a second copy of the
// model.
func OtherLily(s supervisor.Snapshot) bool {
	return s.State == supervisor.Failed && s.Problem == supervisor.PortInUse && s.OtherLily
}

// LeftoverMessage starts the supervisor's Message while it stops an engine an earlier run of
// the app left behind (up to StopTimeout and 2 s more), before starting its own.
const LeftoverMessage = "Stopping an engine left over from an earlier run"

// CleaningUp reports the supervisor stopping a leftover engine: no engine of ours runs yet, but
// one is about to start.
func CleaningUp(s supervisor.Snapshot) bool {
	return !s.State.Running() && strings.HasPrefix(s.Message, LeftoverMessage)
}

// ErrorText is the whole of what went wrong, as "Copy Error Details" copies it ("": nothing).
func ErrorText(s supervisor.Snapshot) string {
	if CleaningUp(s) || OtherLily(s) {
		return ""
	}
	msg := ""
	switch s.State {
	case supervisor.EngineError, supervisor.Failed, supervisor.Restarting:
		if s.Message != supervisor.Retrying {
			msg = s.Message
		}
	}
	if msg == "" {
		return ""
	}
	text := StatusLine(s) + "\n\n" + msg + "\n"
	if s.LastExit != "" && s.State != supervisor.EngineError {
		text += "\nThe engine's last exit: " + s.LastExit + "\n"
	}
	return text
}

// IconFor is the status icon of a state.
func IconFor(st supervisor.State) Icon {
	switch st {
	case supervisor.Stopped:
		return IconOff
	case supervisor.Ready:
		return IconReady
	case supervisor.EngineError, supervisor.Failed:
		return IconError
	}
	return IconWorking
}

var phaseWords = map[string]string{
	"pull":   "Downloading the model",
	"verify": "Verifying the model files",
	"checks": "Checking this Mac",
	"load":   "Loading the model",
	"warm":   "Warming up",
}

// phaseGerund names a failed phase in "Startup failed while …".
var phaseGerund = map[string]string{
	"pull":   "downloading the model",
	"verify": "verifying the model files",
	"checks": "checking this Mac",
	"load":   "loading the model",
	"warm":   "warming up",
}

// StatusLine is the menu's first line.
func StatusLine(s supervisor.Snapshot) string {
	if CleaningUp(s) {
		return "Cleaning up…"
	}
	switch s.State {
	case supervisor.Stopped:
		return "Lily is off"
	case supervisor.Starting:
		return "Starting…"
	case supervisor.Stopping:
		return "Stopping…"
	case supervisor.Loading:
		return loadingLine(s.Engine)
	case supervisor.Ready:
		if s.Engine.Unloaded() {
			return UnloadedLine
		}
		parts := []string{"Ready"}
		if served := Served(s.Engine); served != "" {
			parts = append(parts, served)
		}
		if tps := s.Engine.DecodeTokensPerS; tps > 0 {
			parts = append(parts, formatRate(tps))
		}
		switch q := s.Engine.QueueDepth; { // the running request plus the waiting ones
		case q == 1:
			parts = append(parts, "busy")
		case q > 1:
			parts = append(parts, fmt.Sprintf("busy, %d waiting", q-1))
		}
		return strings.Join(parts, " · ") // the URL is on the Detail line: this one is long enough
	case supervisor.EngineError:
		if g, ok := phaseGerund[s.Engine.FailedPhase]; ok {
			return "Startup failed while " + g
		}
		return "Startup failed"
	case supervisor.Restarting:
		return "The engine stopped · restarting " + formatWait(s.RetryIn)
	case supervisor.Failed:
		switch s.Problem {
		case supervisor.PortInUse:
			if s.OtherLily {
				return fmt.Sprintf("Lily is already running on port %d", s.Options.Port)
			}
			return fmt.Sprintf("Port %d is in use", s.Options.Port)
		case supervisor.CrashLoop:
			return "The engine keeps crashing"
		}
		return "The engine cannot start"
	}
	return s.State.String()
}

// Served says what a ready engine serves, from its /status: the model, its context and the
// memory the engine holds for it ("Qwen3.6-35B-A3B-4bit · 121K context · 21.3 GB"); each is
// left out while unknown. The context is short (FormatContext) so that the Ready line, with a
// decode rate, still fits the menu; the setups carry the exact count.
func Served(e supervisor.EngineStatus) string {
	var parts []string
	if e.Model != "" {
		parts = append(parts, e.Model)
	}
	if e.ContextLength > 0 {
		parts = append(parts, FormatContext(e.ContextLength)+" context")
	}
	if e.MemoryBytes > 0 {
		parts = append(parts, FormatBytes(e.MemoryBytes))
	}
	return strings.Join(parts, " · ")
}

// FormatContext writes a context length in thousands, rounded down so it never claims more than
// is served: 121,088 → "121K"; below a thousand the count itself.
func FormatContext(n int) string {
	if n < 1000 {
		return strconv.Itoa(n)
	}
	return strconv.Itoa(n/1000) + "K"
}

// FormatCount writes a count with thousands separators, as macOS does in English: "121,088".
func FormatCount(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func loadingLine(e supervisor.EngineStatus) string {
	words, ok := phaseWords[e.Phase]
	if !ok {
		words = "Starting"
	}
	if e.Phase == "pull" && (e.BytesTotal > 0 || e.Retry.Reason != "") {
		return DownloadLine(e)
	}
	if e.Progress > 0 {
		words += fmt.Sprintf(" · %d%%", int(e.Progress*100))
	}
	return words
}

// DownloadLine is the status line while the engine pulls the model: how far, how fast, how long
// yet ("Downloading 4.2 of 19.4 GB · 38 MB/s · 7 min left"), or, while the download waits to
// retry with no byte arriving, that it is stalled, until when, and why.
func DownloadLine(e supervisor.EngineStatus) string {
	if r := e.Retry; r.Reason != "" {
		return fmt.Sprintf("Download stalled — retrying %s (%s)", formatWait(time.Duration(r.InS*float64(time.Second))), r.Reason)
	}
	parts := []string{"Downloading " + FormatOf(e.BytesDone, e.BytesTotal)}
	if e.BytesPerS > 0 {
		parts = append(parts, FormatSpeed(e.BytesPerS))
	}
	if e.ETASeconds >= 0 && e.BytesPerS > 0 {
		parts = append(parts, FormatTimeLeft(time.Duration(e.ETASeconds)*time.Second))
	}
	return strings.Join(parts, " · ")
}

// FormatOf writes "done of total" in total's unit, as Finder's copy window does: "4.2 of 19.4 GB".
func FormatOf(done, total int64) string {
	switch {
	case total >= 1e9:
		return fmt.Sprintf("%.1f of %.1f GB", float64(done)/1e9, float64(total)/1e9)
	case total >= 1e6:
		return fmt.Sprintf("%.0f of %.0f MB", float64(done)/1e6, float64(total)/1e6)
	}
	return FormatBytes(done) + " of " + FormatBytes(total)
}

// FormatSpeed writes a download rate: "38 MB/s", "2.5 MB/s", "800 kB/s".
func FormatSpeed(bps float64) string {
	switch {
	case bps >= 10e6:
		return fmt.Sprintf("%.0f MB/s", bps/1e6)
	case bps >= 1e6:
		return fmt.Sprintf("%.1f MB/s", bps/1e6)
	case bps >= 1e3:
		return fmt.Sprintf("%.0f kB/s", bps/1e3)
	}
	return fmt.Sprintf("%.0f B/s", bps)
}

// FormatTimeLeft writes an estimate as coarsely as it deserves: seconds under a minute, whole
// minutes under an hour (rounded up: "1 min left" until it is done), hours and minutes beyond.
func FormatTimeLeft(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%d s left", int(d.Seconds()))
	}
	m := int((d + time.Minute - 1) / time.Minute)
	switch {
	case m < 60:
		return fmt.Sprintf("%d min left", m)
	case m%60 == 0:
		return fmt.Sprintf("%d h left", m/60)
	}
	return fmt.Sprintf("%d h %d min left", m/60, m%60)
}

// DetailLine is the second line: what the engine works on, where it serves, or why it is not
// serving.
func DetailLine(s supervisor.Snapshot) string {
	if CleaningUp(s) {
		return s.Message
	}
	if OtherLily(s) { // the supervisor's message offers the free port, which this menu does not
		return "Started outside this app: use it, or stop it and start Lily here."
	}
	switch s.State {
	case supervisor.Loading:
		if s.Engine.Detail != "" {
			return s.Engine.Detail
		}
		return s.Engine.File
	case supervisor.EngineError, supervisor.Restarting, supervisor.Failed, supervisor.Starting:
		return s.Message
	case supervisor.Ready: // where clients reach it (the status line says what it serves)
		return s.BaseURL()
	case supervisor.Stopped:
		if s.Killed {
			return "The engine did not stop in time and was killed."
		}
	}
	return ""
}

// FormatBytes writes a size in decimal units, as Finder does.
func FormatBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.0f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.0f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d bytes", n)
}

func formatRate(tps float64) string {
	if tps >= 100 {
		return fmt.Sprintf("%.0f tok/s", tps)
	}
	return fmt.Sprintf("%.1f tok/s", tps)
}

func formatWait(d time.Duration) string {
	if d < time.Second {
		return "now"
	}
	return fmt.Sprintf("in %d s", int(d.Round(time.Second)/time.Second))
}

// Truncate shortens s to at most n characters at a word boundary, with an ellipsis.
func Truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)[:n-1]
	if i := strings.LastIndexByte(string(r), ' '); i > len(string(r))/2 {
		return strings.TrimRight(string(r)[:i], " ,.;:") + "…"
	}
	return string(r) + "…"
}

// maxTitle keeps menu lines from growing the menu across the screen.
const maxTitle = 72

// Build lays out the menu for one moment.
func Build(in Input) Model {
	s := in.Snap
	status := StatusLine(s)
	detail, detailTip := DetailLine(s), ""
	raise := in.Raise != nil && s.State == supervisor.EngineError && gpulimit.Wanted(s.Message)
	if raise { // the engine's error is long and technical: a plain line, the error on hover
		detail, detailTip = in.Raise.Problem, s.Message
	}
	if in.Notice != "" {
		detail, detailTip = in.Notice, ""
	}
	cleaning, other := CleaningUp(s), OtherLily(s)
	icon := IconFor(s.State)
	if cleaning {
		icon = IconWorking
	}
	m := Model{Icon: icon, Description: "Lily: " + status, Tooltip: "Lily: " + status}

	toggle := toggleItem(s, in.Quitting, cleaning)
	load := Item{ID: LoadModel, Title: "Load Model", Tooltip: LoadNote, Enabled: !in.Quitting,
		Hidden: s.State != supervisor.Ready || !s.Engine.Unloaded()}

	fix := Item{ID: Fix, Hidden: true, Enabled: !in.Quitting}
	stopOther := Item{ID: StopOther, Hidden: true, Enabled: !in.Quitting && !in.StoppingOther}
	switch {
	case cleaning:
	case other:
		fix.Title, fix.Hidden = "Use the Running Lily", false
		fix.Tooltip = fmt.Sprintf("Copies its URL, %s; Copy Base URL and Use with… point at it too.", s.BaseURL())
		stopOther.Title, stopOther.Hidden = "Stop It and Start Lily Here", false
		stopOther.Tooltip = fmt.Sprintf("Stops the Lily engine on port %d, then starts Lily from this app.", s.Options.Port)
	case raise:
		fix.Title, fix.Tooltip, fix.Hidden = in.Raise.Title, in.Raise.Text, false
		fix.Enabled = fix.Enabled && !in.Raising
	case s.State == supervisor.EngineError:
		fix.Title, fix.Hidden = "Retry", false
		fix.Enabled = fix.Enabled && s.Message != supervisor.Retrying
	case s.State == supervisor.Failed && s.Problem == supervisor.PortInUse && s.SuggestedPort != 0:
		fix.Title, fix.Hidden = fmt.Sprintf("Use Port %d", s.SuggestedPort), false
		fix.Tooltip = fmt.Sprintf("Start Lily on port %d and remember it; clients then use http://…:%d/v1.", s.SuggestedPort, s.SuggestedPort)
	case s.State == supervisor.Failed:
		fix.Title, fix.Hidden = "Try Again", false
	case s.State == supervisor.Restarting:
		fix.Title, fix.Hidden = "Restart Now", false
	}

	login := Item{ID: LaunchAtLogin, Title: "Launch at Login", Enabled: true}
	switch in.Login {
	case LoginOn:
		login.Checked = true
	case LoginNeedsApproval:
		login.Title = "Launch at Login (approve in System Settings…)"
		login.Checked = true
	case LoginUnavailable:
		login.Enabled = false
		login.Tooltip = "Needs Lily.app (in /Applications) on macOS 15 or later."
	}
	errText := ErrorText(s)
	copyErr := Item{ID: CopyError, Title: "Copy Error Details", Tooltip: "Copies the whole error, with the fix it names", Enabled: errText != "", Hidden: errText == ""}
	move := Item{ID: MoveToApplications, Title: "Move Lily to Applications…", Enabled: !in.Quitting, Hidden: !in.Translocated,
		Tooltip: MoveNote}
	showSettings := Item{ID: ShowSettings, Title: "Show Settings File", Enabled: in.Settings != "", Hidden: in.Settings == "",
		Tooltip: SettingsNote(in.Settings)}

	m.Items = []Item{
		{ID: Status, Title: Truncate(status, maxTitle), Tooltip: status},
		{ID: Detail, Title: Truncate(detail, maxTitle), Tooltip: cmp.Or(detailTip, detail), Hidden: detail == ""},
		{ID: Separator},
		toggle,
		load,
		fix,
		stopOther,
		copyErr,
		move,
		{ID: Separator},
		{ID: CopyURL, Title: "Copy Base URL", Tooltip: s.BaseURL(), Enabled: true, Key: "c"},
		{ID: UseWith, Title: "Use with…", Enabled: true},
		{ID: Separator},
		{ID: OpenLogs, Title: "Open Logs", Enabled: true},
		showSettings,
		{ID: UnloadWhenIdle, Title: "Unload When Idle", Tooltip: IdleNote, Enabled: !in.Quitting},
		login,
		{ID: Separator},
		{ID: About, Title: "About Lily", Enabled: true},
		{ID: Quit, Title: "Quit Lily", Tooltip: QuitNote, Key: "q", Enabled: !in.Quitting},
	}
	for _, sn := range snippets.All(SnippetParams(s, in.Lily, in.Context)) {
		m.Snippets = append(m.Snippets, Item{Title: sn.Title, Enabled: true, Tooltip: sn.Note})
	}
	for _, min := range IdleChoices {
		m.IdleChoices = append(m.IdleChoices, Item{Title: IdleTitle(min), Enabled: !in.Quitting, Checked: min == in.IdleUnload})
	}
	return m
}

// toggleItem starts or stops the engine alone: unlike Quit, Lily stays in the menu bar.
func toggleItem(s supervisor.Snapshot, quitting, cleaning bool) Item {
	t := Item{ID: Toggle, Enabled: !quitting, Title: "Stop Server", Tooltip: StopNote}
	switch {
	case quitting:
		t.Title, t.Tooltip = "Quitting…", ""
	case cleaning: // the supervisor starts the engine once the leftover one is gone
		t.Title, t.Tooltip, t.Enabled = "Start Server", StartNote, false
	case s.State == supervisor.Stopped || s.State == supervisor.Failed:
		t.Title, t.Tooltip = "Start Server", StartNote
	case s.State == supervisor.Stopping:
		t.Enabled = false
	}
	return t
}

// What Stop Server, Start Server and Quit Lily do, as their tooltips say: stopping the server
// keeps the app, quitting ends both.
const (
	StopNote  = "Stops the engine and frees the model's memory; Lily stays in the menu bar, where Start Server serves it again."
	StartNote = "Starts the engine: it loads the model and serves it on this Mac."
	QuitNote  = "Stops the engine and quits Lily: the menu-bar icon goes away until you open Lily again."
	LoadNote  = "Loads the model now (about 20 GB of memory), so the next request does not wait for it."
	IdleNote  = "Unloads the model when no request has come for a while, freeing its memory; the next request loads it again. A change restarts an idle engine."
)

// MoveNote says why Lily asks to be moved, and how.
const MoveNote = "macOS runs Lily from a temporary read-only copy because it was opened where it was downloaded; " +
	"the setups' lily command and Launch at Login need it in Applications. " +
	"Drag Lily into the Applications folder, quit Lily, and open it from there."

// SettingsNote says where settings.json is and when it applies.
func SettingsNote(path string) string {
	return path + " (host, port, model_dir, api_key) is read when Lily opens: quit and reopen Lily to apply changes."
}
