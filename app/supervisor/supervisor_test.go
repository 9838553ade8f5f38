package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv("LILY_FAKE_ENGINE") == "1" {
		fakeEngineMain()
		return
	}
	if os.Getenv("LILY_FAKE_APP") != "" {
		fakeAppMain()
		return
	}
	os.Exit(m.Run())
}

// syncBuffer is a log the test can read while the supervisor writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeClock is real time plus an offset the test can advance.
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

type harness struct {
	t       *testing.T
	sup     *Supervisor
	ch      chan Snapshot
	log     *syncBuffer
	port    int
	history []Snapshot
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// newHarness supervises the fake engine with fast, fixed timings; env steers the fake.
func newHarness(t *testing.T, env []string, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, ch: make(chan Snapshot, 4096), log: &syncBuffer{}, port: freePort(t)}
	cfg := Config{
		Engine:       os.Args[0],
		Options:      Options{Host: "127.0.0.1", Port: h.port},
		Env:          append([]string{"LILY_FAKE_ENGINE=1"}, env...),
		Log:          h.log,
		PollInterval: 10 * time.Millisecond,
		StopTimeout:  3 * time.Second,
		BackoffMin:   20 * time.Millisecond,
		BackoffMax:   80 * time.Millisecond,
		StableAfter:  time.Hour,
		MaxRestarts:  3,
		HangTimeout:  -1,
		OnChange:     func(s Snapshot) { h.ch <- s },
	}
	if mod != nil {
		mod(&cfg)
	}
	h.sup = New(cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := h.sup.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if t.Failed() {
			t.Logf("log:\n%s", h.log.String())
		}
	})
	return h
}

// waitFor consumes snapshots until one satisfies ok.
func (h *harness) waitFor(what string, ok func(Snapshot) bool) Snapshot {
	h.t.Helper()
	timeout := time.After(8 * time.Second)
	for {
		select {
		case s := <-h.ch:
			h.history = append(h.history, s)
			if ok(s) {
				return s
			}
		case <-timeout:
			var states []string
			for _, s := range h.history {
				states = append(states, fmt.Sprintf("%s/%s", s.State, s.Engine.Phase))
			}
			h.t.Fatalf("timed out waiting for %s; saw %s; now %+v", what, strings.Join(states, " "), h.sup.Snapshot())
		}
	}
}

func (h *harness) waitState(st State) Snapshot {
	h.t.Helper()
	return h.waitFor(st.String(), func(s Snapshot) bool { return s.State == st })
}

func (h *harness) sawState(st State) bool {
	for _, s := range h.history {
		if s.State == st {
			return true
		}
	}
	return false
}

func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	return err == nil && p.Signal(syscall.Signal(0)) == nil
}

func TestStartWalksPhasesToReadyAndStopsGracefully(t *testing.T) {
	h := newHarness(t, []string{"FAKE_STEP=20ms"}, nil)
	if s := h.sup.Snapshot(); s.State != Stopped || s.BaseURL() != fmt.Sprintf("http://127.0.0.1:%d/v1", h.port) {
		t.Fatalf("initial %+v", s)
	}
	h.sup.Start()
	starting := h.waitState(Starting)
	if starting.PID == 0 {
		t.Fatal("no pid while starting")
	}
	phases := map[string]bool{}
	ready := h.waitFor("ready", func(s Snapshot) bool {
		if s.State == Loading {
			phases[s.Engine.Phase] = true
		}
		return s.State == Ready
	})
	if len(phases) < 3 {
		t.Errorf("saw only phases %v while loading", phases)
	}
	if ready.Engine.Model != "fake-qwen" || ready.Engine.ContextLength != 4096 || ready.Engine.DecodeTokensPerS != 42.5 {
		t.Fatalf("ready status %+v", ready.Engine)
	}
	pid := ready.PID
	h.sup.Stop()
	h.waitState(Stopping)
	st := h.waitState(Stopped)
	if st.Killed || st.LastExit != "exit status 0" || st.PID != 0 || st.Engine != (EngineStatus{}) {
		t.Fatalf("graceful stop: %+v", st)
	}
	if alive(pid) {
		t.Fatal("engine still runs")
	}
	log := h.log.String()
	for _, want := range []string{"engine: lily: listening at", "supervisor: started", "SIGTERM", "engine: lily: stopped"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestStopForcesKillWhenSIGTERMIsIgnored(t *testing.T) {
	h := newHarness(t, []string{"FAKE_IGNORE_TERM=1", "FAKE_STEP=4ms"}, func(c *Config) { c.StopTimeout = 200 * time.Millisecond })
	h.sup.Start()
	h.waitState(Ready)
	t0 := time.Now()
	h.sup.Stop()
	st := h.waitState(Stopped)
	if !st.Killed || !strings.Contains(st.LastExit, "killed") {
		t.Fatalf("forced stop: %+v", st)
	}
	if d := time.Since(t0); d < 200*time.Millisecond {
		t.Fatalf("killed after %s, before the stop timeout", d)
	}
	if !strings.Contains(h.log.String(), "did not stop within 200ms: SIGKILL") {
		t.Fatalf("log:\n%s", h.log.String())
	}
}

func TestCrashesRestartWithBackoffThenGiveUp(t *testing.T) {
	h := newHarness(t, []string{"FAKE_CRASH_AFTER=30ms", "FAKE_STEP=200ms"}, nil)
	h.sup.Start()
	var delays []time.Duration
	for i := 1; i <= 3; i++ {
		s := h.waitState(Restarting)
		if s.Crashes != i || !strings.Contains(s.Message, "fake crash after 30ms") {
			t.Fatalf("restart %d: %+v", i, s)
		}
		delays = append(delays, s.RetryIn)
		h.waitState(Starting)
	}
	if fmt.Sprint(delays) != "[20ms 40ms 80ms]" {
		t.Fatalf("backoff %v, want [20ms 40ms 80ms]", delays)
	}
	failed := h.waitState(Failed)
	if failed.Problem != CrashLoop || failed.Crashes != 4 || !strings.Contains(failed.Message, "crashed 4 times in a row") {
		t.Fatalf("gave up with %+v", failed)
	}
	// Start (the menu's Try Again) counts afresh.
	h.sup.Start()
	if s := h.waitState(Starting); s.Crashes != 0 || s.Problem != NoProblem {
		t.Fatalf("after Start: %+v", s)
	}
	if s := h.waitState(Restarting); s.Crashes != 1 || s.RetryIn != 20*time.Millisecond {
		t.Fatalf("first crash after Try Again: %+v", s)
	}
}

func crash(t *testing.T, s Snapshot) {
	t.Helper()
	resp, err := http.Post(s.Options.RootURL()+"/fake/crash", "", nil)
	if err == nil {
		resp.Body.Close()
	}
}

func TestStableRunResetsBackoff(t *testing.T) {
	clock := &fakeClock{}
	h := newHarness(t, []string{"FAKE_STEP=4ms"}, func(c *Config) {
		c.Now, c.StableAfter, c.BackoffMin, c.BackoffMax, c.MaxRestarts = clock.Now, time.Minute, 10*time.Millisecond, time.Second, 10
	})
	h.sup.Start()
	for i, want := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond} {
		crash(t, h.waitState(Ready))
		if s := h.waitState(Restarting); s.Crashes != i+1 || s.RetryIn != want {
			t.Fatalf("crash %d: %+v", i+1, s)
		}
	}
	ready := h.waitState(Ready)
	clock.Advance(time.Minute) // this run is now a stable one
	crash(t, ready)
	if s := h.waitState(Restarting); s.Crashes != 1 || s.RetryIn != 10*time.Millisecond || !strings.Contains(s.Message, "fake crash on request") {
		t.Fatalf("after a stable run: %+v", s)
	}
	h.waitState(Ready)
}

func TestStopDuringBackoffCancelsRestart(t *testing.T) {
	h := newHarness(t, []string{"FAKE_CRASH_AFTER=20ms"}, func(c *Config) { c.BackoffMin = time.Hour; c.BackoffMax = time.Hour })
	h.sup.Start()
	h.waitState(Restarting)
	h.sup.Stop()
	if s := h.waitState(Stopped); s.Message != "" || s.RetryIn != 0 {
		t.Fatalf("%+v", s)
	}
	done := make(chan bool)
	h.sup.post(func() { done <- h.sup.restartTimer == nil && h.sup.cur == nil })
	if !<-done {
		t.Fatal("a restart is still scheduled")
	}
}

// holdWithFakeEngine runs a second fake engine (not supervised) on port, as a `lily serve`
// started in Terminal would; it returns once the port answers.
func holdWithFakeEngine(t *testing.T, port int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", "--port", strconv.Itoa(port))
	cmd.Env = append(os.Environ(), "LILY_FAKE_ENGINE=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; ; i++ {
		if answersLikeLily(Options{Host: "127.0.0.1", Port: port}, 200*time.Millisecond) {
			return cmd
		}
		if i > 200 {
			t.Fatal("the port holder never answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPortHeldByAnotherLilyIsExplainedWithAFreePort(t *testing.T) {
	h := newHarness(t, []string{"FAKE_STEP=4ms"}, nil)
	holdWithFakeEngine(t, h.port)
	h.sup.Start()
	s := h.waitState(Failed)
	if s.Problem != PortInUse || !s.OtherLily || s.SuggestedPort <= h.port || s.PID != 0 {
		t.Fatalf("%+v", s)
	}
	if !strings.Contains(s.Message, "Another Lily engine is already serving on port "+strconv.Itoa(h.port)) ||
		!strings.Contains(s.Message, fmt.Sprintf("Port %d is free.", s.SuggestedPort)) {
		t.Fatalf("message %q", s.Message)
	}
	// The menu's "Use Port N".
	o := s.Options
	o.Port = s.SuggestedPort
	h.sup.SetOptions(o)
	h.sup.Start()
	if r := h.waitState(Ready); r.Options.Port != s.SuggestedPort {
		t.Fatalf("%+v", r)
	}
}

func TestPortHeldByOtherProgram(t *testing.T) {
	h := newHarness(t, nil, nil)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(h.port)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h.sup.Start()
	s := h.waitState(Failed)
	if s.Problem != PortInUse || s.OtherLily || !strings.HasPrefix(s.Message, fmt.Sprintf("Port %d is in use by another program.", h.port)) {
		t.Fatalf("%+v", s)
	}
}

// TestPortClashReportedByEngine covers the race the probe cannot: the port is taken between the
// probe and the engine's bind, and the engine exits saying so.
func TestPortClashReportedByEngine(t *testing.T) {
	h := newHarness(t, nil, func(c *Config) {
		c.PortCheck = func(string, int) error { return nil }
	})
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(h.port)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h.sup.Start()
	s := h.waitState(Failed)
	if s.Problem != PortInUse || s.LastExit != "exit status 1" || s.SuggestedPort != h.port+1 {
		t.Fatalf("%+v", s)
	}
	if h.sawState(Restarting) {
		t.Fatal("a port clash was treated as a crash")
	}
}

func TestEngineFailsInAPhaseThenRetry(t *testing.T) {
	h := newHarness(t, []string{"FAKE_FAIL=load", "FAKE_STEP=8ms"}, nil)
	h.sup.Start()
	s := h.waitState(EngineError)
	if s.Engine.FailedPhase != "load" || s.Message != "load: fake failure" || s.PID == 0 {
		t.Fatalf("%+v", s)
	}
	h.sup.Retry()
	h.waitFor("retrying", func(s Snapshot) bool { return s.State == Loading })
	if r := h.waitState(Ready); r.PID != s.PID {
		t.Fatalf("retry restarted the process: %+v", r)
	}
}

// TestIdleUnloadedEngineStaysReady: an engine started with --idle-unload that released its model
// is still Ready (it serves; the next request loads the model), with its memory gone; LoadModel
// asks it to load the model again.
func TestIdleUnloadedEngineStaysReady(t *testing.T) {
	h := newHarness(t, []string{"FAKE_STEP=4ms"}, func(c *Config) { c.Options.IdleUnload = 200 * time.Millisecond })
	h.sup.Start()
	if s := h.waitState(Ready); s.Engine.MemoryBytes != 21_300_000_000 {
		t.Fatalf("ready: %+v", s.Engine)
	}
	s := h.waitFor("the unload", func(s Snapshot) bool { return s.Engine.Unloaded() })
	if s.State != Ready || s.Engine.MemoryBytes != 0 {
		t.Fatalf("unloaded: %+v", s)
	}
	h.sup.LoadModel()
	h.waitFor("the load", func(s Snapshot) bool { return s.State == Ready && !s.Engine.Unloaded() })
}

func TestRetryRefusedByEngineIsShown(t *testing.T) {
	h := newHarness(t, []string{"FAKE_FAIL=verify", "FAKE_STEP=4ms", "FAKE_REFUSE_RETRY=1"}, nil)
	h.sup.Start()
	h.waitState(EngineError)
	h.sup.Retry()
	s := h.waitFor("the refusal", func(s Snapshot) bool { return strings.HasPrefix(s.Message, "Retry failed") })
	if s.State != EngineError || s.Message != "Retry failed: the disk is full" {
		t.Fatalf("%+v", s)
	}
}

func TestHungEngineIsKilledAndRestarted(t *testing.T) {
	h := newHarness(t, []string{"FAKE_HANG=1"}, func(c *Config) { c.HangTimeout = 300 * time.Millisecond })
	h.sup.Start()
	s := h.waitState(Restarting)
	if !strings.Contains(s.Message, "stopped answering for 300ms") || !strings.Contains(s.LastExit, "killed") {
		t.Fatalf("%+v", s)
	}
}

func TestAPIKeyComesFromOptionsNotTheEnvironment(t *testing.T) {
	t.Setenv(KeyEnv, "stale-key-from-the-shell")
	h := newHarness(t, []string{"FAKE_STEP=4ms"}, func(c *Config) { c.Options.APIKey = "right-key" })
	h.sup.Start()
	h.waitState(Ready)
	resp, err := http.Get(h.sup.Snapshot().Options.RootURL() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the engine did not get the key: /status without it gave %d", resp.StatusCode)
	}
}

func TestEngineRefusingItsOptionsIsNotRestarted(t *testing.T) {
	h := newHarness(t, []string{"FAKE_BAD_OPTIONS=--ctx 999999 exceeds the model's 4096 positions"}, nil)
	h.sup.Start()
	s := h.waitState(Failed)
	if s.Problem != CannotRun || s.Message != "The engine refused to start: --ctx 999999 exceeds the model's 4096 positions" || h.sawState(Restarting) {
		t.Fatalf("%+v", s)
	}
}

func TestMissingEngineBinary(t *testing.T) {
	h := newHarness(t, nil, func(c *Config) { c.Engine = filepath.Join(t.TempDir(), "lily") })
	h.sup.Start()
	if s := h.waitState(Failed); s.Problem != CannotRun || !strings.Contains(s.Message, "missing") {
		t.Fatalf("%+v", s)
	}
}

func TestRestartAppliesNewOptions(t *testing.T) {
	h := newHarness(t, []string{"FAKE_STEP=4ms"}, nil)
	h.sup.Start()
	first := h.waitState(Ready)
	o := first.Options
	o.Port, o.ModelDir = freePort(t), "/models/other"
	h.sup.SetOptions(o)
	if got := h.sup.Snapshot().Options; got != first.Options {
		t.Fatalf("the snapshot shows options the engine does not run with: %+v", got)
	}
	h.sup.Restart()
	h.waitState(Stopping)
	second := h.waitFor("ready on the new port", func(s Snapshot) bool { return s.State == Ready && s.Options.Port == o.Port })
	if second.PID == first.PID || second.Engine.Model != "/models/other" {
		t.Fatalf("%+v", second)
	}
	if !strings.Contains(h.log.String(), "--model /models/other") {
		t.Fatal("the new options were not passed")
	}
}

func TestOrphanFromAnEarlierRunIsStopped(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "engine.pid")
	h := newHarness(t, []string{"FAKE_STEP=4ms"}, func(c *Config) { c.PIDFile = pidFile })
	orphan := holdWithFakeEngine(t, h.port)
	os.WriteFile(pidFile, []byte(strconv.Itoa(orphan.Process.Pid)+"\n"), 0o644)
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	h.sup.Start()
	s := h.waitState(Ready)
	if s.PID == orphan.Process.Pid {
		t.Fatal("adopted the orphan")
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) && err != nil {
			t.Fatalf("orphan: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the orphan still runs")
	}
	if data, _ := os.ReadFile(pidFile); strings.TrimSpace(string(data)) != strconv.Itoa(s.PID) {
		t.Fatalf("pid file holds %q, want %d", data, s.PID)
	}
	h.sup.Stop()
	h.waitState(Stopped)
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Fatal("pid file left after stop")
	}
}

func TestPIDFileOfAnUnrelatedProcessIsIgnored(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "engine.pid")
	h := newHarness(t, nil, func(c *Config) { c.PIDFile = pidFile })
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	os.WriteFile(pidFile, []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644)
	holdWithFakeEngine(t, h.port)
	h.sup.Start()
	if s := h.waitState(Failed); s.Problem != PortInUse {
		t.Fatalf("%+v", s)
	}
	if !alive(sleeper.Process.Pid) {
		t.Fatal("killed a process that is not an engine")
	}
}

func TestShutdownStopsTheEngineAndEnds(t *testing.T) {
	h := newHarness(t, []string{"FAKE_STEP=4ms"}, nil)
	h.sup.Start()
	pid := h.waitState(Ready).PID
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.sup.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatal("engine survived Shutdown")
	}
	h.sup.Start() // ignored after Shutdown
	if s := h.sup.Snapshot(); s.State != Stopped {
		t.Fatalf("%+v", s)
	}
}

func TestOptionsURLsAndArgs(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		base string
		args string
	}{
		{Options{Host: "127.0.0.1", Port: 8000}, "http://127.0.0.1:8000/v1", "serve --host 127.0.0.1 --port 8000 --exit-with-parent"},
		{Options{Host: "0.0.0.0", Port: 9000, ModelDir: "/m"}, "http://127.0.0.1:9000/v1", "serve --host 0.0.0.0 --port 9000 --model /m --exit-with-parent"},
		{Options{Host: "::1", Port: 8000}, "http://[::1]:8000/v1", "serve --host ::1 --port 8000 --exit-with-parent"},
		{Options{Host: "127.0.0.1", Port: 8000, IdleUnload: time.Hour}, "http://127.0.0.1:8000/v1", "serve --host 127.0.0.1 --port 8000 --idle-unload 1h0m0s --exit-with-parent"},
		{Options{Host: "localhost", Port: 1234, APIKey: "secret"}, "http://localhost:1234/v1", "serve --host localhost --port 1234 --exit-with-parent"},
	} {
		if got := tc.o.BaseURL(); got != tc.base {
			t.Errorf("%+v: base %q, want %q", tc.o, got, tc.base)
		}
		if got := strings.Join(tc.o.Args(), " "); got != tc.args {
			t.Errorf("%+v: args %q, want %q", tc.o, got, tc.args)
		}
	}
	env := engineEnv([]string{"PATH=/bin", "LILY_API_KEY=old"}, []string{"X=1"}, "")
	if strings.Join(env, " ") != "PATH=/bin X=1 LILY_API_KEY=" {
		t.Fatalf("env %v", env)
	}
}

func TestOutputKeepsTheTellingLine(t *testing.T) {
	var log syncBuffer
	o := newOutput(&log, "engine")
	fmt.Fprint(o, "lily: listening at http://127.0.0.1:1/v1\npanic: boom\ngoroutine 1 [running]:\n")
	fmt.Fprint(o, "partial")
	if got := o.lastError(); got != "panic: boom" {
		t.Fatalf("lastError %q", got)
	}
	fmt.Fprint(o, " line\r\nlily: --model DIR is required\n")
	if got := o.lastError(); got != "--model DIR is required" {
		t.Fatalf("lastError %q", got)
	}
	if !strings.Contains(log.String(), "engine: partial line\n") || o.sawPortInUse() {
		t.Fatalf("log %q", log.String())
	}
	fmt.Fprint(o, "listen tcp 127.0.0.1:8000: bind: address already in use")
	o.flush()
	if !o.sawPortInUse() {
		t.Fatal("missed a port clash")
	}
}

func TestBackoffDoublesToTheCap(t *testing.T) {
	s := &Supervisor{cfg: Config{BackoffMin: time.Second, BackoffMax: 10 * time.Second}}
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, s.backoff(n))
	}
	if fmt.Sprint(got) != "[1s 2s 4s 8s 10s 10s]" {
		t.Fatal(got)
	}
}
