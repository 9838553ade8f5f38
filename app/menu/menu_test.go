package menu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lilyformac/lily/app/gpulimit"
	"github.com/lilyformac/lily/app/settings"
	"github.com/lilyformac/lily/app/snippets"
	"github.com/lilyformac/lily/app/supervisor"
)

var opts = supervisor.Options{Host: "127.0.0.1", Port: 8000}

func snap(st supervisor.State, mod func(*supervisor.Snapshot)) supervisor.Snapshot {
	s := supervisor.Snapshot{State: st, Options: opts}
	if mod != nil {
		mod(&s)
	}
	return s
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
		}), "Downloading the model · 42% (8.1 GB of 19.4 GB)", "model-00002-of-00004.safetensors", IconWorking},
		{snap(supervisor.Loading, func(s *supervisor.Snapshot) {
			s.Engine = supervisor.EngineStatus{Phase: "checks", Detail: "test-family model: system checks skipped"}
		}), "Checking this Mac", "test-family model: system checks skipped", IconWorking},
		{snap(supervisor.Loading, func(s *supervisor.Snapshot) { s.Engine = supervisor.EngineStatus{Phase: "load", Progress: 0.6} }),
			"Loading the model · 60%", "", IconWorking},
		{snap(supervisor.Loading, func(s *supervisor.Snapshot) { s.Engine = supervisor.EngineStatus{Phase: "warm"} }), "Warming up", "", IconWorking},
		{snap(supervisor.Ready, func(s *supervisor.Snapshot) {
			s.Engine = supervisor.EngineStatus{Phase: "ready", DecodeTokensPerS: 41.83, Model: "m"}
		}), "Ready · 41.8 tok/s · http://127.0.0.1:8000/v1", "", IconReady},
		{snap(supervisor.Ready, func(s *supervisor.Snapshot) {
			s.Engine = supervisor.EngineStatus{Phase: "ready", DecodeTokensPerS: 152.4, QueueDepth: 2}
		}), "Ready · 152 tok/s · busy, 1 waiting · http://127.0.0.1:8000/v1", "", IconReady},
		{snap(supervisor.Ready, func(s *supervisor.Snapshot) { s.Engine = supervisor.EngineStatus{Phase: "ready"} }),
			"Ready · http://127.0.0.1:8000/v1", "", IconReady},
		{snap(supervisor.Ready, func(s *supervisor.Snapshot) { s.Engine = supervisor.EngineStatus{Phase: "ready", QueueDepth: 1} }),
			"Ready · busy · http://127.0.0.1:8000/v1", "", IconReady},
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
			if len(m.Snippets) != 10 || m.Snippets[0].Title != "Claude Code" || m.Snippets[3].Title != "Qwen Code" || m.Snippets[9].Title != "curl" {
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
		{snap(supervisor.Stopped, nil), "Start Lily", "", false},
		{snap(supervisor.Loading, nil), "Stop Lily", "", false},
		{snap(supervisor.Ready, nil), "Stop Lily", "", false},
		{snap(supervisor.Stopping, nil), "Stop Lily", "", true},
		{snap(supervisor.EngineError, nil), "Stop Lily", "Retry", false},
		{snap(supervisor.Restarting, nil), "Stop Lily", "Restart Now", false},
		{snap(supervisor.Failed, func(s *supervisor.Snapshot) { s.Problem, s.SuggestedPort = supervisor.PortInUse, 8003 }), "Start Lily", "Use Port 8003", false},
		{snap(supervisor.Failed, func(s *supervisor.Snapshot) { s.Problem = supervisor.PortInUse }), "Start Lily", "Try Again", false},
		{snap(supervisor.Failed, func(s *supervisor.Snapshot) { s.Problem = supervisor.CrashLoop }), "Start Lily", "Try Again", false},
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
	}), "/A/Lily.app/Contents/MacOS/lily")
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

func (f *fakeEngine) Start()   { f.calls = append(f.calls, "start") }
func (f *fakeEngine) Stop()    { f.calls = append(f.calls, "stop") }
func (f *fakeEngine) Retry()   { f.calls = append(f.calls, "retry") }
func (f *fakeEngine) Restart() { f.calls = append(f.calls, "restart") }
func (f *fakeEngine) SetOptions(o supervisor.Options) {
	f.opts = o
	f.calls = append(f.calls, "options")
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
	login          LoginState
	loginErr       error
	approvals      int
	about          int
	terminated     int
}

func (p *fakePlatform) Copy(s string) { p.copied = s }
func (p *fakePlatform) Open(path string) error {
	p.opened = path
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
	all := snippets.All(SnippetParams(e.snap, c.Lily))
	for i, sn := range all {
		c.ClickSnippet(i)
		if p.copied != sn.Text || !strings.Contains(p.copied, "served") {
			t.Fatalf("snippet %d copied %q", i, p.copied)
		}
	}
	c.ClickSnippet(0) // Claude Code, started through the app's own lily
	if d := item(c.Model(), Detail).Title; d != "Copied the Claude Code setup" || !strings.Contains(p.copied, "/A/Lily.app/Contents/MacOS/lily launch claude\n") {
		t.Fatalf("%q", d)
	}
	c.ClickSnippet(99) // out of range: ignored
	*now = now.Add(NoticeFor + time.Second)
	if d := item(c.Model(), Detail); !d.Hidden {
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
