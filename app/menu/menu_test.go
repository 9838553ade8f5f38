package menu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lilyformac/lily/app/gpulimit"
	"github.com/lilyformac/lily/app/settings"
	"github.com/lilyformac/lily/app/snippets"
	"github.com/lilyformac/lily/app/supervisor"
	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
)

var opts = supervisor.Options{Host: "127.0.0.1", Port: 8000}

func snap(st supervisor.State, mod func(*supervisor.Snapshot)) supervisor.Snapshot {
	s := supervisor.Snapshot{State: st, Options: opts}
	if mod != nil {
		mod(&s)
	}
	return s
}

// TestDownloadFormats: sizes in the total's unit, speeds and times left as coarse as they
// deserve, the time left rounded up (never "0 min left" while bytes remain).
func TestDownloadFormats(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{FormatOf(4_249_000_000, 19_400_000_000), "4.2 of 19.4 GB"},
		{FormatOf(0, 19_400_000_000), "0.0 of 19.4 GB"},
		{FormatOf(12_400_000, 300_000_000), "12 of 300 MB"},
		{FormatOf(500, 5002), "500 bytes of 5 kB"},
		{FormatSpeed(38_400_000), "38 MB/s"},
		{FormatSpeed(2_540_000), "2.5 MB/s"},
		{FormatSpeed(812_000), "812 kB/s"},
		{FormatSpeed(90), "90 B/s"},
		{FormatTimeLeft(45 * time.Second), "45 s left"},
		{FormatTimeLeft(60 * time.Second), "1 min left"},
		{FormatTimeLeft(61 * time.Second), "2 min left"},
		{FormatTimeLeft(7 * time.Minute), "7 min left"},
		{FormatTimeLeft(59*time.Minute + 30*time.Second), "1 h left"},
		{FormatTimeLeft(65 * time.Minute), "1 h 5 min left"},
		{FormatTimeLeft(3*time.Hour + 10*time.Second), "3 h 1 min left"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestStatusAndDetailLines(t *testing.T) {
	for _, tc := range []struct {
		s              supervisor.Snapshot
		status, detail string
		icon           Icon
	}{
		{snap(supervisor.Stopped, nil), "Lily is off", "", IconOff},
		{snap(supervisor.Starting, nil), "Starting…", "", IconWorking},
		{snap(supervisor.Loading, func(s *supervisor.Snapshot) {
			s.Engine = supervisor.EngineStatus{Phase: "pull", Progress: 0.42, BytesDone: 8_148_000_000, BytesTotal: 19_400_000_000, File: "model-00002-of-00004.safetensors"}
		}), "Downloading 8.1 of 19.4 GB", "model-00002-of-00004.safetensors", IconWorking},
		{snap(supervisor.Loading, func(s *supervisor.Snapshot) {
			s.Engine = supervisor.EngineStatus{Phase: "pull", BytesDone: 4_200_000_000, BytesTotal: 19_400_000_000, BytesPerS: 38.2e6, ETASeconds: 398, File: "model-00001-of-00004.safetensors"}
		}), "Downloading 4.2 of 19.4 GB · 38 MB/s · 7 min left", "model-00001-of-00004.safetensors", IconWorking},
		{snap(supervisor.Loading, func(s *supervisor.Snapshot) {
			s.Engine = supervisor.EngineStatus{Phase: "pull", BytesDone: 4_200_000_000, BytesTotal: 19_400_000_000, ETASeconds: -1,
				Retry: supervisor.Retry{Reason: "HTTP 503", InS: 7.6}, File: "model-00001-of-00004.safetensors"}
		}), "Download stalled — retrying in 8 s (HTTP 503)", "model-00001-of-00004.safetensors", IconWorking},
		{snap(supervisor.Loading, func(s *supervisor.Snapshot) { // listing the Hub: no sizes yet, and it is retried
			s.Engine = supervisor.EngineStatus{Phase: "pull", ETASeconds: -1, Retry: supervisor.Retry{Reason: "connection refused", InS: 0.2}}
		}), "Download stalled — retrying now (connection refused)", "", IconWorking},
		{snap(supervisor.Loading, func(s *supervisor.Snapshot) { s.Engine = supervisor.EngineStatus{Phase: "pull", ETASeconds: -1} }),
			"Downloading the model", "", IconWorking},
		{snap(supervisor.Loading, func(s *supervisor.Snapshot) {
			s.Engine = supervisor.EngineStatus{Phase: "checks", Detail: "test-family model: system checks skipped"}
		}), "Checking this Mac", "test-family model: system checks skipped", IconWorking},
		{snap(supervisor.Loading, func(s *supervisor.Snapshot) { s.Engine = supervisor.EngineStatus{Phase: "load", Progress: 0.6} }),
			"Loading the model · 60%", "", IconWorking},
		{snap(supervisor.Loading, func(s *supervisor.Snapshot) { s.Engine = supervisor.EngineStatus{Phase: "warm"} }), "Warming up", "", IconWorking},
		{snap(supervisor.Ready, func(s *supervisor.Snapshot) {
			s.Engine = supervisor.EngineStatus{Phase: "ready", DecodeTokensPerS: 41.83, Model: "m"}
		}), "Ready · m · 41.8 tok/s", "http://127.0.0.1:8000/v1", IconReady},
		{snap(supervisor.Ready, func(s *supervisor.Snapshot) {
			s.Engine = supervisor.EngineStatus{Phase: "ready", Model: "Qwen3.6-35B-A3B-4bit", ContextLength: 121088}
		}), "Ready · Qwen3.6-35B-A3B-4bit · 121K context", "http://127.0.0.1:8000/v1", IconReady},
		{snap(supervisor.Ready, func(s *supervisor.Snapshot) {
			s.Engine = supervisor.EngineStatus{Phase: "ready", DecodeTokensPerS: 152.4, QueueDepth: 2}
		}), "Ready · 152 tok/s · busy, 1 waiting", "http://127.0.0.1:8000/v1", IconReady},
		{snap(supervisor.Ready, func(s *supervisor.Snapshot) { s.Engine = supervisor.EngineStatus{Phase: "ready"} }),
			"Ready", "http://127.0.0.1:8000/v1", IconReady},
		{snap(supervisor.Ready, func(s *supervisor.Snapshot) { s.Engine = supervisor.EngineStatus{Phase: "ready", QueueDepth: 1} }),
			"Ready · busy", "http://127.0.0.1:8000/v1", IconReady},
		{snap(supervisor.EngineError, func(s *supervisor.Snapshot) {
			s.Engine = supervisor.EngineStatus{Phase: "error", FailedPhase: "checks", Error: "checks: 16 GB of memory; the model needs 21 GB"}
			s.Message = s.Engine.Error
		}), "Startup failed while checking this Mac", "checks: 16 GB of memory; the model needs 21 GB", IconError},
		{snap(supervisor.Restarting, func(s *supervisor.Snapshot) {
			s.RetryIn, s.Message = 4*time.Second, "The engine stopped unexpectedly (panic: boom)."
		}), "The engine stopped · restarting in 4 s", "The engine stopped unexpectedly (panic: boom).", IconWorking},
		{snap(supervisor.Failed, func(s *supervisor.Snapshot) {
			s.Problem, s.SuggestedPort, s.Message = supervisor.PortInUse, 8001, "Port 8000 is in use by another program. Port 8001 is free."
		}), "Port 8000 is in use", "Port 8000 is in use by another program. Port 8001 is free.", IconError},
		{snap(supervisor.Failed, func(s *supervisor.Snapshot) { s.Problem = supervisor.CrashLoop }), "The engine keeps crashing", "", IconError},
		{snap(supervisor.Failed, func(s *supervisor.Snapshot) { s.Problem = supervisor.CannotRun }), "The engine cannot start", "", IconError},
		{snap(supervisor.Stopping, nil), "Stopping…", "", IconWorking},
		{snap(supervisor.Stopped, func(s *supervisor.Snapshot) { s.Killed = true }), "Lily is off", "The engine did not stop in time and was killed.", IconOff},
	} {
		if got := StatusLine(tc.s); got != tc.status {
			t.Errorf("%s: status %q, want %q", tc.s.State, got, tc.status)
		}
		if got := DetailLine(tc.s); got != tc.detail {
			t.Errorf("%s: detail %q, want %q", tc.s.State, got, tc.detail)
		}
		m := Build(Input{Snap: tc.s})
		if m.Icon != tc.icon {
			t.Errorf("%s: icon %s, want %s", tc.s.State, m.Icon.Name(), tc.icon.Name())
		}
		if d := item(m, Detail); d.Hidden != (tc.detail == "") {
			t.Errorf("%s: detail hidden %v", tc.s.State, d.Hidden)
		}
	}
}

func item(m Model, id ID) Item {
	for _, it := range m.Items {
		if it.ID == id {
			return it
		}
	}
	panic("no item")
}

func ids(m Model) string {
	var b strings.Builder
	for _, it := range m.Items {
		b.WriteByte(byte('a' + it.ID))
	}
	return b.String()
}

// TestLayoutIsStable: every state gives the same items in the same order, so the darwin layer
// builds the NSMenu once and only updates titles and flags.
func TestLayoutIsStable(t *testing.T) {
	want := ids(Build(Input{Snap: snap(supervisor.Stopped, nil)}))
	for st := supervisor.Stopped; st <= supervisor.Failed; st++ {
		for _, login := range []LoginState{LoginUnavailable, LoginOff, LoginOn, LoginNeedsApproval} {
			m := Build(Input{Snap: snap(st, nil), Login: login, Notice: "n", Quitting: st == supervisor.Stopping})
			if got := ids(m); got != want {
				t.Fatalf("%s: layout %q, want %q", st, got, want)
			}
			if len(m.Snippets) != 14 || m.Snippets[0].Title != "Claude Code" || m.Snippets[6].Title != "Qwen Code" || m.Snippets[13].Title != "curl" {
				t.Fatalf("snippets %+v", m.Snippets)
			}
		}
	}
}

func TestToggleAndFix(t *testing.T) {
	for _, tc := range []struct {
		s              supervisor.Snapshot
		toggle, fix    string
		toggleDisabled bool
	}{
		{snap(supervisor.Stopped, nil), "Start Server", "", false},
		{snap(supervisor.Loading, nil), "Stop Server", "", false},
		{snap(supervisor.Ready, nil), "Stop Server", "", false},
		{snap(supervisor.Stopping, nil), "Stop Server", "", true},
		{snap(supervisor.EngineError, nil), "Stop Server", "Retry", false},
		{snap(supervisor.Restarting, nil), "Stop Server", "Restart Now", false},
		{snap(supervisor.Failed, func(s *supervisor.Snapshot) { s.Problem, s.SuggestedPort = supervisor.PortInUse, 8003 }), "Start Server", "Use Port 8003", false},
		{snap(supervisor.Failed, func(s *supervisor.Snapshot) { s.Problem = supervisor.PortInUse }), "Start Server", "Try Again", false},
		{snap(supervisor.Failed, func(s *supervisor.Snapshot) { s.Problem = supervisor.CrashLoop }), "Start Server", "Try Again", false},
	} {
		m := Build(Input{Snap: tc.s})
		tg, fx := item(m, Toggle), item(m, Fix)
		if tg.Title != tc.toggle || tg.Enabled == tc.toggleDisabled {
			t.Errorf("%s: toggle %+v", tc.s.State, tg)
		}
		if fx.Hidden != (tc.fix == "") || (!fx.Hidden && fx.Title != tc.fix) {
			t.Errorf("%s: fix %+v, want %q", tc.s.State, fx, tc.fix)
		}
	}
	retrying := snap(supervisor.EngineError, func(s *supervisor.Snapshot) { s.Message = supervisor.Retrying })
	if item(Build(Input{Snap: retrying}), Fix).Enabled {
		t.Error("Retry stays clickable while retrying")
	}
}

func TestLoginItemStates(t *testing.T) {
	for _, tc := range []struct {
		state            LoginState
		checked, enabled bool
		title            string
	}{
		{LoginUnavailable, false, false, "Launch at Login"},
		{LoginOff, false, true, "Launch at Login"},
		{LoginOn, true, true, "Launch at Login"},
		{LoginNeedsApproval, true, true, "Launch at Login (approve in System Settings…)"},
	} {
		it := item(Build(Input{Snap: snap(supervisor.Stopped, nil), Login: tc.state}), LaunchAtLogin)
		if it.Checked != tc.checked || it.Enabled != tc.enabled || it.Title != tc.title {
			t.Errorf("%d: %+v", tc.state, it)
		}
	}
}

func TestQuittingDisablesActions(t *testing.T) {
	m := Build(Input{Snap: snap(supervisor.Stopping, nil), Quitting: true})
	if item(m, Toggle).Title != "Quitting…" || item(m, Quit).Enabled || item(m, Toggle).Enabled {
		t.Fatalf("%+v", m.Items)
	}
}

func TestTruncate(t *testing.T) {
	long := strings.Repeat("word ", 30)
	got := Truncate(long, 40)
	if len([]rune(got)) > 40 || !strings.HasSuffix(got, "…") || strings.Contains(got, "  ") {
		t.Fatalf("%q", got)
	}
	if got := Truncate("short\n text", 40); got != "short text" {
		t.Fatalf("%q", got)
	}
	if got := Truncate(strings.Repeat("x", 50), 10); got != "xxxxxxxxx…" {
		t.Fatalf("%q", got)
	}
	long = "checks: " + strings.Repeat("a very long error message ", 10)
	if it := item(Build(Input{Snap: snap(supervisor.EngineError, func(s *supervisor.Snapshot) { s.Message = long })}), Detail); it.Tooltip != long || len([]rune(it.Title)) > maxTitle {
		t.Fatalf("%+v", it)
	}
}

func TestModelID(t *testing.T) {
	if got := ModelID(snap(supervisor.Stopped, nil)); got != DefaultModelID {
		t.Fatal(got)
	}
	if got := ModelID(snap(supervisor.Stopped, func(s *supervisor.Snapshot) { s.Options.ModelDir = "/Volumes/x/Qwen3.6-q4/" })); got != "Qwen3.6-q4" {
		t.Fatal(got)
	}
	if got := ModelID(snap(supervisor.Ready, func(s *supervisor.Snapshot) { s.Engine.Model = "served-id" })); got != "served-id" {
		t.Fatal(got)
	}
	p := SnippetParams(snap(supervisor.Ready, func(s *supervisor.Snapshot) {
		s.Options.APIKey, s.Engine.ContextLength = "k", 65536
	}), "/A/Lily.app/Contents/MacOS/lily", 121088)
	if p.KeyEnv != "LILY_API_KEY" || p.ContextLength != 65536 || p.BaseURL != "http://127.0.0.1:8000/v1" || p.Lily != "/A/Lily.app/Contents/MacOS/lily" {
		t.Fatalf("%+v", p)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{999: "999 bytes", 1500: "2 kB", 12_300_000: "12 MB", 19_400_000_000: "19.4 GB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("%d: %q, want %q", n, got, want)
		}
	}
}

// fakeEngine records the controller's calls.
type fakeEngine struct {
	snap  supervisor.Snapshot
	calls []string
	opts  supervisor.Options
}

func (f *fakeEngine) Start()     { f.calls = append(f.calls, "start") }
func (f *fakeEngine) Stop()      { f.calls = append(f.calls, "stop") }
func (f *fakeEngine) Retry()     { f.calls = append(f.calls, "retry") }
func (f *fakeEngine) Restart()   { f.calls = append(f.calls, "restart") }
func (f *fakeEngine) LoadModel() { f.calls = append(f.calls, "load") }
func (f *fakeEngine) SetOptions(o supervisor.Options) {
	f.opts = o
	f.calls = append(f.calls, "options")
}
func (f *fakeEngine) SetMenuOpen(open bool) {
	f.calls = append(f.calls, fmt.Sprintf("menu-open=%v", open))
}
func (f *fakeEngine) Snapshot() supervisor.Snapshot { return f.snap }
func (f *fakeEngine) Shutdown(context.Context) error {
	f.calls = append(f.calls, "shutdown")
	return nil
}

func (f *fakeEngine) took() string {
	s := strings.Join(f.calls, ",")
	f.calls = nil
	return s
}

// fakePlatform records what the controller asked of macOS.
type fakePlatform struct {
	copied, opened string
	revealed       string
	login          LoginState
	loginErr       error
	approvals      int
	about          int
	terminated     int
	asked          []string // Confirm's questions
	confirm        bool     // Confirm's answer
	notified       []string // Notify's title + "\n" + body
}

func (p *fakePlatform) Notify(title, body string) { p.notified = append(p.notified, title+"\n"+body) }

func (p *fakePlatform) Copy(s string) { p.copied = s }
func (p *fakePlatform) Open(path string) error {
	p.opened = path
	return nil
}
func (p *fakePlatform) Reveal(path string) error {
	p.revealed = path
	return nil
}
func (p *fakePlatform) LoginItem() LoginState { return p.login }
func (p *fakePlatform) SetLoginItem(on bool) error {
	if p.loginErr != nil {
		return p.loginErr
	}
	p.login = LoginOff
	if on {
		p.login = LoginOn
	}
	return nil
}
func (p *fakePlatform) OpenLoginItemsSettings() { p.approvals++ }
func (p *fakePlatform) About()                  { p.about++ }
func (p *fakePlatform) Terminate()              { p.terminated++ }
func (p *fakePlatform) Confirm(title, text, ok, cancel string) bool {
	p.asked = append(p.asked, title+"\n"+text+"\n"+ok+"|"+cancel)
	return p.confirm
}

func newTestController(t *testing.T) (*Controller, *fakeEngine, *fakePlatform, *time.Time) {
	dir := t.TempDir()
	e := &fakeEngine{snap: snap(supervisor.Stopped, nil)}
	p := &fakePlatform{login: LoginOff}
	c := NewController(e, p, settings.Defaults(), filepath.Join(dir, "settings.json"), filepath.Join(dir, "Logs", "lily.log"))
	now := time.Unix(1e9, 0)
	c.Now = func() time.Time { return now }
	changes := 0
	c.Changed = func() { changes++ }
	return c, e, p, &now
}

func TestControllerToggleAndFix(t *testing.T) {
	c, e, _, _ := newTestController(t)
	for _, tc := range []struct {
		st   supervisor.State
		id   ID
		want string
	}{
		{supervisor.Stopped, Toggle, "start"},
		{supervisor.Failed, Toggle, "start"},
		{supervisor.Ready, Toggle, "stop"},
		{supervisor.Restarting, Toggle, "stop"},
		{supervisor.Stopping, Toggle, ""},
		{supervisor.EngineError, Fix, "retry"},
		{supervisor.Restarting, Fix, "start"},
		{supervisor.Failed, Fix, "start"},
		{supervisor.Ready, Fix, ""},
	} {
		e.snap = snap(tc.st, nil)
		c.Click(tc.id)
		if got := e.took(); got != tc.want {
			t.Errorf("%s click %d: %q, want %q", tc.st, tc.id, got, tc.want)
		}
	}
}

func TestControllerUsePortSavesAndStarts(t *testing.T) {
	c, e, _, _ := newTestController(t)
	e.snap = snap(supervisor.Failed, func(s *supervisor.Snapshot) { s.Problem, s.SuggestedPort = supervisor.PortInUse, 8001 })
	c.Click(Fix)
	if got := e.took(); got != "options,start" || e.opts.Port != 8001 || e.opts.Host != "127.0.0.1" {
		t.Fatalf("%q %+v", got, e.opts)
	}
	saved, err := settings.Load(c.SettingsPath, settings.Defaults())
	if err != nil || saved.Port != 8001 || c.Settings().Port != 8001 {
		t.Fatalf("%+v %v", saved, err)
	}
	if d := item(c.Model(), Detail); d.Title != "Lily now uses port 8001" {
		t.Fatalf("%+v", d)
	}
}

func TestControllerCopiesAndNoticesExpire(t *testing.T) {
	c, e, p, now := newTestController(t)
	e.snap = snap(supervisor.Ready, func(s *supervisor.Snapshot) { s.Engine.Model = "served" })
	c.Click(CopyURL)
	if p.copied != "http://127.0.0.1:8000/v1" || item(c.Model(), Detail).Title != "Copied http://127.0.0.1:8000/v1" {
		t.Fatalf("%q %+v", p.copied, item(c.Model(), Detail))
	}
	c.Lily = "/A/Lily.app/Contents/MacOS/lily"
	all := snippets.All(SnippetParams(e.snap, c.Lily, 0))
	for i, sn := range all {
		c.ClickSnippet(i)
		if p.copied != sn.Text || !strings.Contains(p.copied+sn.Note, "served") && !strings.HasPrefix(p.copied, c.Lily+" launch ") {
			t.Fatalf("snippet %d copied %q", i, p.copied)
		}
	}
	c.ClickSnippet(0) // Claude Code, started through the app's own lily
	if d := item(c.Model(), Detail).Title; d != "Copied the Claude Code setup" || !strings.Contains(p.copied, "/A/Lily.app/Contents/MacOS/lily launch claude\n") {
		t.Fatalf("%q", d)
	}
	c.ClickSnippet(99) // out of range: ignored
	*now = now.Add(NoticeFor + time.Second)
	if d := item(c.Model(), Detail); d.Title != e.snap.BaseURL() { // a ready engine's Detail: its URL
		t.Fatalf("notice did not expire: %+v", d)
	}
}

func TestControllerOpenLogs(t *testing.T) {
	c, _, p, _ := newTestController(t)
	c.Click(OpenLogs)
	if p.opened != filepath.Dir(c.LogPath) {
		t.Fatalf("opened %q before the log exists", p.opened)
	}
	os.MkdirAll(filepath.Dir(c.LogPath), 0o755)
	os.WriteFile(c.LogPath, []byte("x\n"), 0o644)
	c.Click(OpenLogs)
	if p.opened != c.LogPath {
		t.Fatalf("opened %q", p.opened)
	}
}

func TestControllerLaunchAtLogin(t *testing.T) {
	c, _, p, _ := newTestController(t)
	c.Click(LaunchAtLogin)
	if p.login != LoginOn || !c.Settings().LaunchAtLogin || !item(c.Model(), LaunchAtLogin).Checked {
		t.Fatalf("%d %+v", p.login, c.Settings())
	}
	if s, _ := settings.Load(c.SettingsPath, settings.Defaults()); !s.LaunchAtLogin {
		t.Fatal("not saved")
	}
	c.Click(LaunchAtLogin)
	if p.login != LoginOff || c.Settings().LaunchAtLogin {
		t.Fatal("did not switch off")
	}
	p.loginErr = errors.New("Operation not permitted")
	c.Click(LaunchAtLogin)
	if d := item(c.Model(), Detail).Title; d != "Launch at Login: Operation not permitted" {
		t.Fatalf("%q", d)
	}
	p.login, p.loginErr = LoginNeedsApproval, nil
	c.Click(LaunchAtLogin)
	if p.approvals != 1 {
		t.Fatal("did not open System Settings")
	}
	p.login = LoginUnavailable
	c.Click(LaunchAtLogin)
	if p.approvals != 1 || p.login != LoginUnavailable {
		t.Fatal("acted on an unavailable login item")
	}
}

func TestControllerSyncLogin(t *testing.T) {
	c, _, p, _ := newTestController(t)
	p.login = LoginOn // switched on in System Settings since the last run
	c.SyncLogin()
	if !c.Settings().LaunchAtLogin {
		t.Fatal("not synced")
	}
	if s, _ := settings.Load(c.SettingsPath, settings.Defaults()); !s.LaunchAtLogin {
		t.Fatal("not saved")
	}
}

func TestControllerAboutQuitShutdown(t *testing.T) {
	c, e, p, _ := newTestController(t)
	c.Click(About)
	c.Click(Quit)
	if p.about != 1 || p.terminated != 1 || !strings.Contains(item(c.Model(), Toggle).Title, "Quitting") {
		t.Fatalf("%+v", p)
	}
	done := make(chan struct{})
	c.Shutdown(time.Second, func() { close(done) })
	<-done
	if got := e.took(); got != "shutdown" {
		t.Fatalf("%q", got)
	}
}

// fakeLimit is a Mac whose GPU memory limit can be raised; Raise answers with err.
type fakeLimit struct {
	mem, current uint64
	err          error
	ran          chan gpulimit.Offer
}

func (f *fakeLimit) Offer() (gpulimit.Offer, bool) { return gpulimit.For(f.mem, f.current) }
func (f *fakeLimit) Raise(o gpulimit.Offer) error {
	f.ran <- o
	return f.err
}

// TestControllerRaisesGPULimit: where the engine fails for want of GPU memory on a 24 GB Mac,
// the Fix item offers the raise in place of Retry, says plainly what it does, runs the exact
// command once, then restarts the engine; a cancelled prompt changes nothing.
func TestControllerRaisesGPULimit(t *testing.T) {
	c, e, _, _ := newTestController(t)
	c.Changed = func() {} // the raise reports from its own goroutine (the app's redraw is safe for that)
	const memErr = "gpu-memory: GPU working set 17.2 GB (Metal recommendedMaxWorkingSetSize) < 20.9 GB needed (model 19.4 GB + runtime 1.5 GB); macOS limits how much memory the GPU may wire; fix: sudo sysctl iogpu.wired_limit_mb=20480 lets the GPU use up to 20 GB of this Mac's 24 GB and leaves macOS 4 GB; it lasts until the Mac restarts (run it again after each restart)"
	e.snap = snap(supervisor.EngineError, func(s *supervisor.Snapshot) {
		s.Engine = supervisor.EngineStatus{Phase: "error", FailedPhase: "checks", Error: memErr}
		s.Message = memErr
	})
	// Without a GPU limit (Linux, console mode) the memory error keeps Retry.
	if f := item(c.Model(), Fix); f.Title != "Retry" {
		t.Fatalf("no GPULimit: fix %q", f.Title)
	}
	lim := &fakeLimit{mem: 24 << 30, ran: make(chan gpulimit.Offer, 1)}
	c.GPULimit = lim
	m := c.Model()
	fix, detail := item(m, Fix), item(m, Detail)
	if fix.Title != "Raise the GPU Memory Limit to 20 GB…" || !fix.Enabled || fix.Hidden ||
		fix.Tooltip != "Lets the GPU use up to 20 GB of this Mac's 24 GB, which leaves macOS 4 GB. It lasts until the Mac restarts. Asks once for an administrator's password to run: sudo sysctl iogpu.wired_limit_mb=20480" {
		t.Fatalf("fix %+v", fix)
	}
	if detail.Title != "macOS lets the GPU use too little memory for the model" || detail.Tooltip != memErr {
		t.Fatalf("detail %+v", detail)
	}
	waitNotice := func(prefix string) {
		t.Helper()
		for i := 0; i < 500; i++ {
			if d := item(c.Model(), Detail); strings.HasPrefix(d.Title, prefix) {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Fatalf("no notice %q: %+v", prefix, item(c.Model(), Detail))
	}

	lim.err = gpulimit.ErrCancelled
	c.Click(Fix)
	if o := <-lim.ran; o.MB != 20480 || o.Argv[0] != "/usr/bin/osascript" || !strings.Contains(o.Argv[2], `"/usr/sbin/sysctl iogpu.wired_limit_mb=20480"`) {
		t.Fatalf("ran %+v", o)
	}
	waitNotice("The GPU memory limit was not changed")
	if got := e.took(); got != "" {
		t.Fatalf("a cancelled raise did %q", got)
	}

	lim.err = nil
	c.Click(Fix)
	<-lim.ran
	waitNotice("The GPU may now use 20 GB until the Mac restarts")
	if got := e.took(); got != "restart" {
		t.Fatalf("after the raise: %q, want restart", got)
	}

	// Already raised (or another failure): Retry as before.
	lim.current = 20480
	if f := item(c.Model(), Fix); f.Title != "Retry" {
		t.Fatalf("raised: fix %q", f.Title)
	}
	lim.current = 0
	e.snap.Message = "checks: 16 GB of memory; the model needs 21 GB"
	if f := item(c.Model(), Fix); f.Title != "Retry" {
		t.Fatalf("other error: fix %q", f.Title)
	}
	c.Click(Fix)
	if got := e.took(); got != "retry" {
		t.Fatalf("other error: %q", got)
	}
}

// anotherLily is the supervisor's snapshot when another Lily engine holds the port, as
// failPortInUse writes it (with a free port found).
func anotherLily() supervisor.Snapshot {
	return snap(supervisor.Failed, func(s *supervisor.Snapshot) {
		s.Problem, s.OtherLily, s.SuggestedPort = supervisor.PortInUse, true, 8001
		s.Message = "Another Lily engine is already serving on port 8000 (a `lily serve` in Terminal?). Port 8001 is free."
	})
}

// TestAnotherLilyOffersNoNewPort (issue 24, defect 2): with another Lily on the port the menu
// offers to use it or to stop it, and nothing names or moves to the free port, which would
// load a second copy of the model; a port held by another program still offers the free port.
func TestAnotherLilyOffersNoNewPort(t *testing.T) {
	s := anotherLily()
	m := Build(Input{Snap: s})
	for _, it := range append(slices.Clone(m.Items), m.Snippets...) {
		if !it.Hidden && (strings.Contains(it.Title, "8001") || strings.Contains(it.Tooltip, "8001") || strings.Contains(it.Title, "Use Port")) {
			t.Errorf("offers the free port: %+v", it)
		}
	}
	if fx := item(m, Fix); fx.Hidden || fx.Title != "Use the Running Lily" || !fx.Enabled {
		t.Errorf("fix %+v", fx)
	}
	if so := item(m, StopOther); so.Hidden || !so.Enabled || so.Title != "Stop It and Start Lily Here" {
		t.Errorf("stop other %+v", so)
	}
	if st, d := item(m, Status).Title, item(m, Detail).Title; st != "Lily is already running on port 8000" || strings.HasSuffix(d, "…") {
		t.Error(st, d)
	}
	if cu := item(m, CopyURL); !cu.Enabled || cu.Tooltip != "http://127.0.0.1:8000/v1" {
		t.Errorf("copy URL %+v", cu)
	}
	if ce := item(m, CopyError); !ce.Hidden {
		t.Errorf("another Lily is not an error: %+v", ce)
	}
	// Another program on the port: the free port is still the fix, and stopping is not offered.
	prog := s
	prog.OtherLily = false
	if m := Build(Input{Snap: prog}); item(m, Fix).Title != "Use Port 8001" || !item(m, StopOther).Hidden {
		t.Errorf("%+v %+v", item(m, Fix), item(m, StopOther))
	}

	c, e, p, _ := newTestController(t)
	e.snap = s
	c.Click(Fix) // use it: its URL, and nothing saved, set or started
	if p.copied != "http://127.0.0.1:8000/v1" || e.took() != "" {
		t.Fatalf("copied %q", p.copied)
	}
	if _, err := os.Stat(c.SettingsPath); err == nil {
		t.Fatal("settings written")
	}
	c.ClickSnippet(1) // Claude Code by its variables: pointed at the running Lily
	if !strings.Contains(p.copied, "ANTHROPIC_BASE_URL=http://127.0.0.1:8000\n") {
		t.Fatal(p.copied)
	}
	// Stop it: Other stops the engine on port 8000, then this app's engine starts.
	other := &fakeOther{done: make(chan struct{})}
	c.Other = other
	c.Click(StopOther)
	select {
	case <-other.done:
	case <-time.After(5 * time.Second):
		t.Fatal("Other.Stop never called")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		stopping := c.stopping
		c.mu.Unlock()
		if !stopping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still stopping")
		}
		time.Sleep(time.Millisecond)
	}
	if other.port != 8000 || e.took() != "start" {
		t.Fatalf("stopped port %d", other.port)
	}
}

type fakeOther struct {
	port int
	done chan struct{}
}

func (f *fakeOther) Stop(o supervisor.Options) error {
	f.port = o.Port
	close(f.done)
	return nil
}

// doctorJSON is `lily doctor --output json` on a Mac where lily serve holds n positions (why:
// the reason it is below the model's; err: the weights do not fit): the context check syscheck
// writes for it, and the serving block (syscheck.Serving) doctor writes beside it.
func doctorJSON(t *testing.T, n int, why string, err error) []byte {
	t.Helper()
	c := syscheck.ContextCheck(32<<30, 21<<30, func(int64, int64) (int, string, error) { return n, why, err })
	serving := &syscheck.Serving{WorkingSet: 21 << 30, KVBits: 16, Context: n, ContextNote: why, Parallel: 3, PrefillChunk: 4096, PrefillSlice: 512, PrefillRoute: "simdgroup"}
	if err != nil {
		serving = &syscheck.Serving{WorkingSet: 21 << 30, KVBits: 16, Error: err.Error()}
	}
	return doctorOutput(t, serving, c)
}

// doctorOutput is doctor's JSON with serving and the checks.
func doctorOutput(t *testing.T, serving *syscheck.Serving, checks ...syscheck.Check) []byte {
	t.Helper()
	out, err := json.Marshal(struct {
		OK      bool              `json:"ok"`
		Checks  []syscheck.Check  `json:"checks"`
		Serving *syscheck.Serving `json:"serving,omitempty"`
	}{true, append([]syscheck.Check{{Name: "memory", Status: syscheck.Pass, Detail: "32 GB"}}, checks...), serving})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDoctorContext reads the context from doctor's serving block, not from the context check's
// words (which may change); without a serving block, or with the weights not fitting, it fails
// and says why.
func TestDoctorContext(t *testing.T) {
	for _, tc := range []struct {
		n   int
		why string
	}{{121088, "the GPU working set holds 128,256 positions; 3 sequences at once"}, {262144, ""}, {40960, "the working set is small"}} {
		if got, err := DoctorContext(doctorJSON(t, tc.n, tc.why, nil)); err != nil || got != tc.n {
			t.Errorf("%d (%q): got %d, %v", tc.n, tc.why, got, err)
		}
	}
	reworded := syscheck.Check{Name: "context", Status: syscheck.Warn, Detail: "serves 5 positions"}
	if got, err := DoctorContext(doctorOutput(t, &syscheck.Serving{Context: 98304}, reworded)); err != nil || got != 98304 {
		t.Errorf("serving 98,304 beside a reworded check: %d, %v", got, err)
	}
	if _, err := DoctorContext(doctorJSON(t, 0, "", errors.New("the weights do not fit"))); err == nil || !strings.Contains(err.Error(), "the weights do not fit") {
		t.Errorf("weights that do not fit: %v", err)
	}
	if _, err := DoctorContext([]byte(`{"checks":[{"name":"context","status":"skip","detail":"not macOS"}]}`)); err == nil || !strings.Contains(err.Error(), "not macOS") {
		t.Errorf("no serving block: %v", err)
	}
}

// TestSetupCopiedWhileStoppedCarriesServedContext (issue 24, defect 3): before the engine has
// said its context, the setups carry the one the engine will serve (what the bundled engine's
// doctor sizes on this Mac), not the model's 262,144; once the engine reports its own, that is
// kept after it stops; a raise of the GPU limit asks again.
func TestSetupCopiedWhileStoppedCarriesServedContext(t *testing.T) {
	c, e, p, _ := newTestController(t)
	c.Lily = "/A/Lily.app/Contents/MacOS/lily"
	predicted := make(chan struct{}, 4)
	c.Predict = func() (int, error) { return DoctorContext(doctorJSON(t, 121088, "3 sequences at once", nil)) }
	c.Changed = func() {
		select {
		case predicted <- struct{}{}:
		default:
		}
	}
	c.PredictContext()
	select {
	case <-predicted:
	case <-time.After(5 * time.Second):
		t.Fatal("no prediction")
	}
	copied := func(id string) string {
		t.Helper()
		for i, sn := range snippets.All(SnippetParams(e.snap, c.Lily, 0)) {
			if sn.ID == id {
				c.ClickSnippet(i)
				return p.copied
			}
		}
		t.Fatalf("no snippet %s", id)
		return ""
	}
	for _, id := range []string{"cline", "continue", "zed", "claude-code-env", "codex-env", "opencode-env"} {
		if got := copied(id); !strings.Contains(got, "121088") || strings.Contains(got, "262144") {
			t.Errorf("%s copied while stopped:\n%s", id, got)
		}
	}
	e.snap = snap(supervisor.Ready, func(s *supervisor.Snapshot) { s.Engine.ContextLength = 110336 })
	c.Model()
	e.snap = snap(supervisor.Stopped, nil)
	if got := copied("cline"); !strings.Contains(got, "110336") {
		t.Errorf("the served context was not kept:\n%s", got)
	}
	// Nothing known (no engine to ask): the model's own window, the only number left.
	c2, e2, p2, _ := newTestController(t)
	e2.snap = snap(supervisor.Stopped, nil)
	c2.ClickSnippet(slices.IndexFunc(snippets.All(SnippetParams(e2.snap, "", 0)), func(s snippets.Snippet) bool { return s.ID == "cline" }))
	if !strings.Contains(p2.copied, "262144") {
		t.Error(p2.copied)
	}
}

// TestErrorDetailsReachable (issue 24, defect 5): the Detail line shows the start of an error;
// "Copy Error Details" copies all of it, the fix it names included, also where the GPU limit's
// offer replaces the line; there is nothing to copy when nothing failed.
func TestErrorDetailsReachable(t *testing.T) {
	long := "checks: the GPU may use 16.0 GiB of this Mac's 24 GB, and the model needs 20.3 GiB; raise the limit until the next restart: sudo sysctl iogpu.wired_limit_mb=20480"
	s := snap(supervisor.EngineError, func(s *supervisor.Snapshot) {
		s.Engine = supervisor.EngineStatus{Phase: "error", FailedPhase: "checks", Error: long}
		s.Message = long
	})
	m := Build(Input{Snap: s})
	if strings.Contains(item(m, Detail).Title, "sysctl") {
		t.Fatal("the test's error is not cut") // the premise: the line alone hides the fix
	}
	if ce := item(m, CopyError); ce.Hidden || !ce.Enabled || ce.Title != "Copy Error Details" {
		t.Fatalf("%+v", ce)
	}
	c, e, p, _ := newTestController(t)
	c.GPULimit = &fakeLimit{mem: 24 << 30}
	for _, st := range []supervisor.Snapshot{s, snap(supervisor.Failed, func(s *supervisor.Snapshot) {
		s.Problem, s.Message, s.LastExit = supervisor.CannotRun, "The engine refused to start: lily: "+long, "exit status 1"
	})} {
		e.snap = st
		m := c.Model()
		if ce := item(m, CopyError); ce.Hidden || !ce.Enabled {
			t.Fatalf("%s: %+v", st.State, ce)
		}
		c.Click(CopyError)
		if !strings.Contains(p.copied, "sudo sysctl iogpu.wired_limit_mb=20480") || !strings.Contains(p.copied, StatusLine(st)) {
			t.Fatalf("%s: copied %q", st.State, p.copied)
		}
		if d := item(c.Model(), Detail).Title; d != "Copied the error details" {
			t.Fatal(d)
		}
	}
	for _, st := range []supervisor.Snapshot{snap(supervisor.Stopped, nil), snap(supervisor.Ready, nil), snap(supervisor.Loading, nil)} {
		if ce := item(Build(Input{Snap: st}), CopyError); !ce.Hidden || ce.Enabled {
			t.Errorf("%s: %+v", st.State, ce)
		}
	}
}

// TestCleaningUpState (issue 24, defect 7): while the supervisor stops an engine left over from
// an earlier run, the menu says so and Start is disabled; the supervisor's message is the one
// the menu recognises.
func TestCleaningUpState(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "supervisor", "supervisor.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `"`+LeftoverMessage) {
		t.Fatalf("the supervisor no longer writes %q", LeftoverMessage)
	}
	for _, st := range []supervisor.State{supervisor.Stopped, supervisor.Failed, supervisor.Restarting} {
		s := snap(st, func(s *supervisor.Snapshot) { s.Message = LeftoverMessage + "…" })
		m := Build(Input{Snap: s})
		if tg := item(m, Toggle); tg.Enabled {
			t.Errorf("%s: %+v", st, tg)
		}
		if item(m, Status).Title != "Cleaning up…" || item(m, Detail).Title != LeftoverMessage+"…" || m.Icon != IconWorking || !item(m, Fix).Hidden || !item(m, CopyError).Hidden {
			t.Errorf("%s: %+v", st, m.Items[:6])
		}
		c, e, _, _ := newTestController(t)
		e.snap = s
		c.Click(Toggle)
		if got := e.took(); got != "" {
			t.Errorf("%s: Start clicked through: %s", st, got)
		}
	}
	if item(Build(Input{Snap: snap(supervisor.Stopped, nil)}), Toggle).Enabled == false {
		t.Error("Start disabled when off")
	}
}

// TestSettingsFileAndTexts (issue 24, defect 7): an item reveals settings.json and says that
// Lily reads it when it opens; the login item needs macOS 15; every state has its own
// accessibility description.
func TestSettingsFileAndTexts(t *testing.T) {
	c, _, p, _ := newTestController(t)
	m := c.Model()
	ss := item(m, ShowSettings)
	if ss.Hidden || !ss.Enabled || !strings.Contains(ss.Tooltip, c.SettingsPath) || !strings.Contains(ss.Tooltip, "quit and reopen Lily") {
		t.Fatalf("%+v", ss)
	}
	c.Click(ShowSettings)
	if p.revealed != c.SettingsPath || !strings.Contains(item(c.Model(), Detail).Title, "quit and reopen Lily") {
		t.Fatalf("revealed %q", p.revealed)
	}
	if tip := item(Build(Input{Snap: snap(supervisor.Stopped, nil), Login: LoginUnavailable}), LaunchAtLogin).Tooltip; !strings.Contains(tip, "macOS 15") {
		t.Error(tip)
	}
	icons := map[string]bool{}
	for _, ic := range []Icon{IconOff, IconWorking, IconReady, IconError} {
		icons[ic.Description()] = true
	}
	if len(icons) != 4 || icons["Lily"] {
		t.Errorf("icon descriptions %v", icons)
	}
	descs := map[string]bool{}
	for st := supervisor.Stopped; st <= supervisor.Failed; st++ {
		d := Build(Input{Snap: snap(st, nil)}).Description
		if !strings.HasPrefix(d, "Lily: ") || d == "Lily: " {
			t.Errorf("%s: %q", st, d)
		}
		descs[d] = true
	}
	if len(descs) != int(supervisor.Failed)+1 {
		t.Errorf("states share descriptions: %v", descs)
	}
}

// TestMoveToApplications (issue 24, defect 8): only a translocated Lily offers the move; the item
// shows the downloaded Lily.app and the Applications folder in Finder and says what to do next.
func TestMoveToApplications(t *testing.T) {
	c, e, p, _ := newTestController(t)
	if mv := item(c.Model(), MoveToApplications); !mv.Hidden {
		t.Fatalf("offered outside translocation: %+v", mv)
	}
	c.Click(MoveToApplications)
	if p.revealed != "" || p.opened != "" {
		t.Fatalf("not translocated, yet Finder showed %q %q", p.revealed, p.opened)
	}
	c.Translocated, c.MoveFrom = true, "/Users/ann/Downloads/Lily.app"
	mv := item(c.Model(), MoveToApplications)
	if mv.Hidden || !mv.Enabled || !strings.Contains(mv.Tooltip, "Applications") {
		t.Fatalf("%+v", mv)
	}
	c.Click(MoveToApplications)
	if p.revealed != "/Users/ann/Downloads/Lily.app" || p.opened != ApplicationsDir {
		t.Fatalf("revealed %q, opened %q", p.revealed, p.opened)
	}
	if d := item(c.Model(), Detail).Title; !strings.Contains(d, "Drag Lily into Applications") {
		t.Fatalf("detail %q", d)
	}
	c.MenuOpen(true)
	c.MenuOpen(false)
	if got := e.took(); got != "menu-open=true,menu-open=false" {
		t.Fatalf("the engine was told %q", got)
	}
}

// TestDownloadConfirmation: starting an engine that would download the model asks first (size
// left, free disk, where, that it resumes); "Not Now" starts nothing, "Download and Start"
// starts it and is saved, so the next start asks no more. A complete model, or a model_dir of
// the user's, is never asked about.
func TestDownloadConfirmation(t *testing.T) {
	c, e, p, _ := newTestController(t)
	pending := lifecycle.Download{Dir: "/Users/me/Library/Application Support/Lily/models/mlx-community/Qwen3.6-35B-A3B-4bit",
		Left: lifecycle.ModelBytes, Free: 120e9}
	calls := 0
	c.Pending = func() lifecycle.Download { calls++; return pending }

	c.Click(Toggle)
	if got := e.took(); got != "" || len(p.asked) != 1 {
		t.Fatalf("declined: engine calls %q, %d questions", got, len(p.asked))
	}
	for _, want := range []string{"Download the model to start Lily?", "Qwen3.6-35B-A3B-4bit: 19.4 GB to download, into ", pending.Dir, "120.0 GB is free",
		"resumes where it stopped", "awake", DownloadOK + "|" + DownloadCancel} {
		if !strings.Contains(p.asked[0], want) {
			t.Errorf("the question lacks %q:\n%s", want, p.asked[0])
		}
	}
	if m := c.Model(); m.Items[1].Title != "Lily is off: Start Server offers the 19.4 GB download again" {
		t.Errorf("after Not Now the menu says %q", m.Items[1].Title)
	}
	if _, err := os.Stat(c.SettingsPath); err == nil || c.Settings().DownloadAccepted {
		t.Fatal("a declined download was remembered")
	}

	p.confirm = true
	c.Click(Toggle)
	if got := e.took(); got != "start" || len(p.asked) != 2 {
		t.Fatalf("accepted: engine calls %q, %d questions", got, len(p.asked))
	}
	saved, err := settings.Load(c.SettingsPath, settings.Defaults())
	if err != nil || !saved.DownloadAccepted {
		t.Fatalf("the acceptance was not saved: %+v, %v", saved, err)
	}
	p.confirm = false
	c.Click(Toggle) // stopped again (the fake engine's snapshot): asked once is enough
	if got := e.took(); got != "start" || len(p.asked) != 2 {
		t.Fatalf("after accepting: engine calls %q, %d questions", got, len(p.asked))
	}

	// A complete model needs no question; neither does a checkpoint of the user's (model_dir),
	// which the engine does not pull: Pending is not even consulted.
	c2, e2, p2, _ := newTestController(t)
	c2.Pending = func() lifecycle.Download { return lifecycle.Download{Dir: pending.Dir, Complete: true, Free: 1} }
	c2.Start()
	if got := e2.took(); got != "start" || len(p2.asked) != 0 {
		t.Fatalf("complete model: %q, %d questions", got, len(p2.asked))
	}
	s := settings.Defaults()
	s.ModelDir = "/models/mine"
	c3 := NewController(&fakeEngine{snap: snap(supervisor.Stopped, nil)}, &fakePlatform{}, s, "", "")
	c3.Pending = func() lifecycle.Download { t.Fatal("Pending consulted with a model_dir"); return pending }
	c3.Start()
	if got := c3.Engine.(*fakeEngine).took(); got != "start" {
		t.Fatalf("model_dir: %q", got)
	}
	if calls != 2 {
		t.Fatalf("Pending consulted %d times; want 2 (once per question)", calls)
	}
}

// TestDownloadPromptText: a resumed download says what is left, and a disk too full for it
// says how much to free.
func TestDownloadPromptText(t *testing.T) {
	title, text := DownloadPrompt(lifecycle.Download{Dir: "/m", Left: 7_300_000_000, Free: 5_000_000_000})
	if title != "Finish downloading the model to start Lily?" || !strings.Contains(text, "7.3 GB left to download, into /m.") ||
		!strings.Contains(text, "Only 5.0 GB is free on that disk: free up 2.3 GB first") {
		t.Fatalf("%s\n%s", title, text)
	}
	if _, text := DownloadPrompt(lifecycle.Download{Dir: "/m", Left: lifecycle.ModelBytes, Free: -1}); strings.Contains(text, "free") {
		t.Fatalf("an unknown free space is reported: %s", text)
	}
}

func TestServedAndFormatCount(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 121088: "121,088", 1234567: "1,234,567", -4096: "-4,096"} {
		if got := FormatCount(n); got != want {
			t.Errorf("FormatCount(%d) = %q, want %q", n, got, want)
		}
	}
	for _, tc := range []struct {
		e    supervisor.EngineStatus
		want string
	}{
		{supervisor.EngineStatus{Model: "Qwen3.6-35B-A3B-4bit", ContextLength: 121088}, "Qwen3.6-35B-A3B-4bit · 121K context"},
		{supervisor.EngineStatus{Model: "Qwen3.6-35B-A3B-4bit", ContextLength: 121088, MemoryBytes: 21_300_000_000}, "Qwen3.6-35B-A3B-4bit · 121K context · 21.3 GB"},
		{supervisor.EngineStatus{Model: "m", ContextLength: 512, MemoryBytes: 80_000_000}, "m · 512 context · 80 MB"},
		{supervisor.EngineStatus{Model: "m"}, "m"},                   // context not reported yet
		{supervisor.EngineStatus{ContextLength: 4096}, "4K context"}, // no model id
		{supervisor.EngineStatus{}, ""},
	} {
		if got := Served(tc.e); got != tc.want {
			t.Errorf("Served(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
	// With the default model, its memory and a decode rate, the menu's first line still fits
	// untruncated (maxTitle): the URL went to the Detail line to make room.
	s := snap(supervisor.Ready, func(s *supervisor.Snapshot) {
		s.Engine = supervisor.EngineStatus{Phase: "ready", Model: "Qwen3.6-35B-A3B-4bit", ContextLength: 121088, MemoryBytes: 21_300_000_000, DecodeTokensPerS: 41.8}
	})
	m := Build(Input{Snap: s})
	if got, want := item(m, Status).Title, "Ready · Qwen3.6-35B-A3B-4bit · 121K context · 21.3 GB · 41.8 tok/s"; got != want {
		t.Errorf("status title %q, want %q", got, want)
	}
	if d := item(m, Detail); d.Title != "http://127.0.0.1:8000/v1" || d.Hidden {
		t.Errorf("detail %+v, want the base URL", d)
	}
}

// TestObserveNotifies drives the controller through state sequences and checks the notifications
// the platform was asked to post: one per transition into Ready or a failure, none for polls that
// repeat a state, for a stop the user chose, or while quitting.
func TestObserveNotifies(t *testing.T) {
	ready := snap(supervisor.Ready, func(s *supervisor.Snapshot) {
		s.Engine = supervisor.EngineStatus{Phase: "ready", Model: "Qwen3.6-35B-A3B-4bit", ContextLength: 121088}
	})
	failed := snap(supervisor.EngineError, func(s *supervisor.Snapshot) {
		s.Engine = supervisor.EngineStatus{Phase: "error", FailedPhase: "load", Error: "load: out of memory"}
		s.Message = "load: out of memory"
	})
	port := snap(supervisor.Failed, func(s *supervisor.Snapshot) {
		s.Problem, s.Message = supervisor.PortInUse, "Port 8000 is in use by another program."
	})
	st := func(state supervisor.State) supervisor.Snapshot { return snap(state, nil) }
	for _, tc := range []struct {
		name  string
		seq   []supervisor.Snapshot
		quit  bool // the user chose Quit before the sequence
		wants []string
	}{
		{"starting then ready", []supervisor.Snapshot{st(supervisor.Starting), st(supervisor.Loading), ready},
			false, []string{"Lily is ready\nQwen3.6-35B-A3B-4bit · 121K context · http://127.0.0.1:8000/v1"}},
		{"ready polled again", []supervisor.Snapshot{st(supervisor.Loading), ready, ready, ready},
			false, []string{"Lily is ready\nQwen3.6-35B-A3B-4bit · 121K context · http://127.0.0.1:8000/v1"}},
		{"startup fails", []supervisor.Snapshot{st(supervisor.Starting), st(supervisor.Loading), failed, failed},
			false, []string{"Startup failed while loading the model\nload: out of memory"}},
		{"retried and failed again", []supervisor.Snapshot{st(supervisor.Loading), failed, st(supervisor.Loading), failed},
			false, []string{"Startup failed while loading the model\nload: out of memory", "Startup failed while loading the model\nload: out of memory"}},
		{"port in use", []supervisor.Snapshot{st(supervisor.Starting), port, port},
			false, []string{"Port 8000 is in use\nPort 8000 is in use by another program."}},
		{"stopped by the user", []supervisor.Snapshot{st(supervisor.Loading), st(supervisor.Stopping), st(supervisor.Stopped)},
			false, nil},
		{"ready, stopped, ready again", []supervisor.Snapshot{st(supervisor.Loading), ready, st(supervisor.Stopping), st(supervisor.Stopped), st(supervisor.Starting), ready},
			false, []string{"Lily is ready\nQwen3.6-35B-A3B-4bit · 121K context · http://127.0.0.1:8000/v1", "Lily is ready\nQwen3.6-35B-A3B-4bit · 121K context · http://127.0.0.1:8000/v1"}},
		{"fails while quitting", []supervisor.Snapshot{st(supervisor.Loading), failed}, true, nil},
	} {
		p := &fakePlatform{}
		c := NewController(&fakeEngine{}, p, settings.Settings{}, "", "")
		if tc.quit {
			c.Shutdown(time.Second, func() {})
		}
		for _, s := range tc.seq {
			c.Observe(s)
		}
		if !slices.Equal(p.notified, tc.wants) {
			t.Errorf("%s: notified %q, want %q", tc.name, p.notified, tc.wants)
		}
	}
}
