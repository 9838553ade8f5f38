// Package supervisor runs Lily's engine (`lily serve`) for the menu-bar app: it starts and stops
// the process (SIGTERM, then SIGKILL after a timeout), follows its startup by polling GET /status,
// restarts it with exponential backoff after a crash, and explains port clashes. It is portable Go
// with no AppKit in it; the app only renders its Snapshots.
//
// The engine runs with --exit-with-parent and a pipe as its standard input whose write end only
// this process holds: if the app dies, crash or SIGKILL included, the engine reads end-of-file and
// shuts down, instead of keeping the model's ~20 GB until the app's next launch (the pid file
// covers an engine from an older app that ran without it).
//
// States and transitions (everything runs on one goroutine, in order):
//
//	Stopped ──Start──▶ Starting ──/status answers──▶ Loading ──phase ready──▶ Ready
//	                      │                            │  ▲                    │
//	                      │                  phase error▼  │Retry (POST /status/retry)
//	                      │                          EngineError               │
//	   any running state ──Stop──▶ Stopping ──exit──▶ Stopped                  │
//	   unexpected exit ──▶ Restarting ──backoff──▶ Starting (or Failed after MaxRestarts)
//	   port taken (probe or engine's "already in use") ──▶ Failed{PortInUse, SuggestedPort}
//
// Ready covers an engine whose model is unloaded for being idle (Options.IdleUnload; /status
// phase unloaded): it serves, and the next request, or LoadModel, loads the model again.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// State is where the engine is, as the menu shows it.
type State int

const (
	Stopped     State = iota // not running, by choice (or never started)
	Starting                 // the process runs; /status does not answer yet
	Loading                  // the engine walks its startup phases (checks, pull, verify, checks, load, warm)
	Ready                    // serving requests
	EngineError              // the engine runs but a startup phase failed: Retry re-runs it
	Restarting               // the engine exited unexpectedly; waiting out the backoff
	Stopping                 // SIGTERM sent; SIGKILL follows after StopTimeout
	Failed                   // not running and not retrying: see Problem and Message
)

var stateNames = [...]string{"stopped", "starting", "loading", "ready", "engine-error", "restarting", "stopping", "failed"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Running reports whether an engine process exists in this state.
func (s State) Running() bool {
	return s == Starting || s == Loading || s == Ready || s == EngineError || s == Stopping
}

// Problem says why the supervisor is Failed.
type Problem int

const (
	NoProblem Problem = iota
	PortInUse         // the port is taken: Snapshot.SuggestedPort is a free one, OtherLily says who
	CrashLoop         // the engine crashed more than MaxRestarts times in a row
	CannotRun         // the engine binary is missing, or the options are invalid
)

// Options say what to run: `lily serve --host Host --port Port [--model ModelDir]
// [--idle-unload IdleUnload] --exit-with-parent`, with the API key passed in the environment
// ($LILY_API_KEY), never on the command line.
type Options struct {
	Host       string
	Port       int
	ModelDir   string
	APIKey     string
	IdleUnload time.Duration // unload the model after this long without requests (0: never)
}

// Args is the engine's command line after the binary.
func (o Options) Args() []string {
	args := []string{"serve", "--host", o.Host, "--port", strconv.Itoa(o.Port)}
	if o.ModelDir != "" {
		args = append(args, "--model", o.ModelDir)
	}
	if o.IdleUnload > 0 {
		args = append(args, "--idle-unload", o.IdleUnload.String())
	}
	return append(args, "--exit-with-parent") // the stdin pipe launch gives it
}

// clientHost is the address a client on this Mac uses: a wildcard bind is reached on loopback.
func (o Options) clientHost() string {
	switch o.Host {
	case "", "0.0.0.0":
		return "127.0.0.1"
	case "::":
		return "::1"
	}
	return o.Host
}

// RootURL is the engine's address without a path, e.g. http://127.0.0.1:8000.
func (o Options) RootURL() string {
	return "http://" + net.JoinHostPort(o.clientHost(), strconv.Itoa(o.Port))
}

// BaseURL is the OpenAI base URL clients are given, e.g. http://127.0.0.1:8000/v1.
func (o Options) BaseURL() string { return o.RootURL() + "/v1" }

// Snapshot is the supervisor's state at one moment; it is a comparable value.
type Snapshot struct {
	State         State
	Options       Options       // what runs, or will run on the next start
	Engine        EngineStatus  // the last /status answer of the running engine
	PID           int           // the engine's process id while one runs
	Problem       Problem       // why Failed
	Message       string        // a sentence for the user: why Failed, Restarting or EngineError
	SuggestedPort int           // PortInUse: a free port to offer instead (0: none found)
	OtherLily     bool          // PortInUse: the port answers like a Lily engine
	Crashes       int           // consecutive crashes; a run longer than StableAfter resets it
	RetryIn       time.Duration // Restarting: the backoff being waited out
	LastExit      string        // how the last engine process ended, e.g. "exit status 2"
	Killed        bool          // the last stop needed SIGKILL
}

// BaseURL is the OpenAI base URL for the snapshot's options.
func (s Snapshot) BaseURL() string { return s.Options.BaseURL() }

// Config configures a Supervisor; zero durations take the defaults in parentheses.
type Config struct {
	Engine  string   // path to the lily binary
	Options Options  // the first run's options (SetOptions changes them)
	Env     []string // extra environment for the engine, KEY=VALUE
	Log     io.Writer
	PIDFile string // remembers the engine's pid, so an engine orphaned by an app crash is stopped

	PollInterval time.Duration // how often /status is read while it starts, or the menu is open (500ms)
	IdlePoll     time.Duration // how often while Ready and the menu is closed (5s): the answer rarely changes then
	StopTimeout  time.Duration // SIGTERM → SIGKILL (10s)
	BackoffMin   time.Duration // first restart delay, doubled per consecutive crash (1s)
	BackoffMax   time.Duration // the delay's ceiling (1m)
	StableAfter  time.Duration // a run this long resets the crash count (2m)
	MaxRestarts  int           // restarts in a row before giving up (5)
	HangTimeout  time.Duration // a running engine silent on /status this long is killed and restarted (90s; <0 disables)

	Now       func() time.Time                  // the clock for run lengths and hang detection (time.Now)
	PortCheck func(host string, port int) error // nil, ErrPortInUse or another error (CheckPort)
	OnChange  func(Snapshot)                    // called on the supervisor's goroutine after each change; must not block
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.PollInterval, 500*time.Millisecond)
	def(&c.IdlePoll, 5*time.Second)
	def(&c.StopTimeout, 10*time.Second)
	def(&c.BackoffMin, time.Second)
	def(&c.BackoffMax, time.Minute)
	def(&c.StableAfter, 2*time.Minute)
	def(&c.HangTimeout, 90*time.Second)
	if c.MaxRestarts == 0 {
		c.MaxRestarts = 5
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.PortCheck == nil {
		c.PortCheck = CheckPort
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	c.Log = &lockedWriter{w: c.Log}
}

// Supervisor owns one engine process at a time. Its methods only queue a request; the effects
// show up in Snapshot and OnChange.
type Supervisor struct {
	cfg  Config
	do   chan func()
	done chan struct{}

	mu       sync.Mutex
	snap     Snapshot // the last published state, for Snapshot()
	menuOpen bool     // SetMenuOpen: poll at PollInterval even when Ready
	wake     chan struct{}

	// Owned by the loop goroutine.
	st           Snapshot
	cur          *process
	restartTimer *time.Timer
	restartGen   int
	pendingStart bool     // start again once the current process has stopped (Restart)
	nextOptions  *Options // SetOptions while a process runs: applied once it has exited
	closing      bool     // Shutdown: end the loop once the process has stopped
	ended        bool
}

// process is one run of the engine.
type process struct {
	cmd        *exec.Cmd
	parent     io.Closer // the engine's stdin pipe: held open while it runs (closed by Wait)
	out        *output
	started    time.Time
	cancelPoll context.CancelFunc
	answered   bool
	lastAnswer time.Time
	hung       bool
	stopping   bool
	killed     bool
	exited     bool
	killTimer  *time.Timer
}

// New starts a supervisor (its engine stays stopped until Start).
func New(cfg Config) *Supervisor {
	cfg.defaults()
	s := &Supervisor{cfg: cfg, do: make(chan func(), 64), done: make(chan struct{}), wake: make(chan struct{}, 1)}
	s.st = Snapshot{State: Stopped, Options: cfg.Options}
	s.snap = s.st
	go s.loop()
	return s
}

func (s *Supervisor) loop() {
	for f := range s.do {
		f()
		if s.ended {
			close(s.done)
			return
		}
	}
}

// post queues f for the loop; false once the supervisor has shut down.
func (s *Supervisor) post(f func()) bool {
	select {
	case <-s.done:
		return false
	default:
	}
	select {
	case s.do <- f:
		return true
	case <-s.done:
		return false
	}
}

// Snapshot returns the current state.
func (s *Supervisor) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

func (s *Supervisor) publish() {
	s.mu.Lock()
	changed := s.snap != s.st
	s.snap = s.st
	s.mu.Unlock()
	if changed && s.cfg.OnChange != nil {
		s.cfg.OnChange(s.st)
	}
}

// Start starts the engine if none runs (from Stopped or Failed, or at once from Restarting).
func (s *Supervisor) Start() { s.post(s.start) }

// Stop stops the engine (or a pending restart), and leaves the supervisor Stopped.
func (s *Supervisor) Stop() {
	s.post(func() {
		s.pendingStart = false
		switch {
		case s.cur != nil:
			s.beginStop()
		case s.st.State == Restarting || s.st.State == Failed:
			s.cancelRestart()
			s.st.State, s.st.Problem, s.st.Message, s.st.RetryIn, s.st.SuggestedPort, s.st.OtherLily = Stopped, NoProblem, "", 0, 0, false
			s.publish()
		}
	})
}

// Restart stops the engine if it runs and starts it again (with the current options).
func (s *Supervisor) Restart() {
	s.post(func() {
		if s.cur == nil {
			s.start()
			return
		}
		s.pendingStart = true
		s.beginStop()
	})
}

// Retrying is Snapshot.Message while a Retry request is on its way to the engine.
const Retrying = "Retrying…"

// Retry asks an engine whose startup failed (EngineError) to run it again; from Failed or
// Restarting it starts the engine.
func (s *Supervisor) Retry() {
	s.post(func() {
		switch s.st.State {
		case EngineError:
			p, o := s.cur, s.st.Options // a running engine's options are the snapshot's
			s.st.Message = Retrying
			s.publish()
			go func() {
				if err := postRetry(o, s.pollTimeout()); err != nil {
					s.post(func() {
						if s.cur == p && s.st.State == EngineError {
							s.st.Message = "Retry failed: " + err.Error()
							s.publish()
						}
					})
				}
			}()
		case Failed, Restarting, Stopped:
			s.start()
		}
	})
}

// LoadModel asks a Ready engine whose model is unloaded for being idle to load it now; /status
// then shows the load, as at startup.
func (s *Supervisor) LoadModel() {
	s.post(func() {
		if s.st.State != Ready || !s.st.Engine.Unloaded() {
			return
		}
		o := s.st.Options
		go func() {
			if err := postLoad(o, s.pollTimeout()); err != nil {
				s.logf("asking the engine to load the model: %v", err) // a failed load itself shows in /status
			}
			s.wakePoll() // the load's phases show at once
		}()
	})
}

// SetOptions changes what the next start runs. A running engine keeps its options (and the
// snapshot shows them) until it exits; Restart applies new ones at once.
func (s *Supervisor) SetOptions(o Options) {
	s.post(func() {
		if s.cur != nil {
			s.nextOptions = &o
			return
		}
		s.st.Options = o
		s.publish()
	})
}

// Shutdown stops the engine and ends the supervisor; it returns when the process has exited. If
// ctx ends first the engine is killed at once.
func (s *Supervisor) Shutdown(ctx context.Context) error {
	s.post(func() {
		s.closing, s.pendingStart = true, false
		s.cancelRestart()
		if s.cur == nil {
			s.finish()
		} else if s.st.State != Stopping {
			s.beginStop()
		}
	})
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
	}
	s.post(func() {
		if p := s.cur; p != nil && !p.exited {
			p.killed = true
			p.cmd.Process.Kill()
		}
	})
	select {
	case <-s.done:
	case <-time.After(2 * time.Second):
	}
	return ctx.Err()
}

func (s *Supervisor) finish() {
	s.st.State = Stopped
	s.publish()
	s.ended = true
}

func (s *Supervisor) logf(format string, args ...any) {
	fmt.Fprintf(s.cfg.Log, "%s supervisor: %s\n", time.Now().Format(logTime), fmt.Sprintf(format, args...))
}

const logTime = "2006-01-02 15:04:05.000"

func (s *Supervisor) start() {
	if s.cur != nil || s.closing {
		return
	}
	s.st.Crashes = 0
	s.launch()
}

func (s *Supervisor) cancelRestart() {
	s.restartGen++
	if s.restartTimer != nil {
		s.restartTimer.Stop()
		s.restartTimer = nil
	}
}

func (s *Supervisor) fail(p Problem, msg string) {
	s.cancelRestart()
	s.st.State, s.st.Problem, s.st.Message, s.st.RetryIn = Failed, p, msg, 0
	s.logf("failed: %s", msg)
	s.publish()
}

// launch starts a process with the current options.
func (s *Supervisor) launch() {
	s.cancelRestart()
	o := s.st.Options
	s.st.Problem, s.st.Message, s.st.SuggestedPort, s.st.OtherLily, s.st.RetryIn, s.st.Engine, s.st.Killed =
		NoProblem, "", 0, false, 0, EngineStatus{}, false
	if o.Port < 1 || o.Port > 65535 || o.Host == "" {
		s.fail(CannotRun, fmt.Sprintf("Invalid address %q port %d.", o.Host, o.Port))
		return
	}
	if _, err := os.Stat(s.cfg.Engine); err != nil {
		s.fail(CannotRun, fmt.Sprintf("The engine binary is missing (%s).", s.cfg.Engine))
		return
	}
	s.stopOrphan(o)
	if err := s.cfg.PortCheck(o.Host, o.Port); err != nil {
		if errors.Is(err, ErrPortInUse) {
			s.failPortInUse()
		} else {
			s.fail(CannotRun, fmt.Sprintf("Cannot listen on %s: %v.", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)), err))
		}
		return
	}
	cmd := exec.Command(s.cfg.Engine, o.Args()...)
	cmd.Env = engineEnv(os.Environ(), s.cfg.Env, o.APIKey)
	out := newOutput(s.cfg.Log, "engine")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 2 * time.Second // a grandchild holding the pipes must not hang Wait
	// --exit-with-parent: the engine ends when this pipe's write end closes, which the kernel
	// does when this process ends, however it ends; nothing is written to it. process.parent
	// keeps the writer reachable while the engine runs: an *os.File's finalizer would close it.
	parent, err := cmd.StdinPipe()
	if err != nil {
		s.fail(CannotRun, fmt.Sprintf("Cannot start the engine: %v.", err))
		return
	}
	if err := cmd.Start(); err != nil {
		s.fail(CannotRun, fmt.Sprintf("Cannot start the engine: %v.", err))
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{cmd: cmd, parent: parent, out: out, started: s.cfg.Now(), cancelPoll: cancel}
	s.cur = p
	s.st.State, s.st.PID = Starting, cmd.Process.Pid
	s.writePIDFile(cmd.Process.Pid)
	s.logf("started %s %s (pid %d)", s.cfg.Engine, strings.Join(o.Args(), " "), cmd.Process.Pid)
	go func() {
		err := cmd.Wait()
		s.post(func() { s.onExit(p, err) })
	}()
	go s.poll(ctx, p, o)
	s.publish()
}

// engineEnv is the parent's environment with LILY_API_KEY replaced by the settings' key (empty:
// none), so a key exported in the user's shell cannot lock the app out of its own engine.
func engineEnv(parent, extra []string, key string) []string {
	env := make([]string, 0, len(parent)+len(extra)+1)
	for _, kv := range parent {
		if !strings.HasPrefix(kv, KeyEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, extra...)
	return append(env, KeyEnv+"="+key)
}

// KeyEnv is the variable the engine reads its API key from.
const KeyEnv = "LILY_API_KEY"

func (s *Supervisor) beginStop() {
	p := s.cur
	if p == nil || p.stopping {
		return
	}
	p.stopping = true
	s.st.State = Stopping
	s.logf("stopping the engine (pid %d): SIGTERM", p.cmd.Process.Pid)
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.killTimer = time.AfterFunc(s.cfg.StopTimeout, func() {
		s.post(func() {
			if !p.exited {
				s.logf("the engine did not stop within %s: SIGKILL", s.cfg.StopTimeout)
				p.killed = true
				p.cmd.Process.Kill()
			}
		})
	})
	s.publish()
}

func (s *Supervisor) onExit(p *process, err error) {
	p.exited = true
	p.cancelPoll()
	if p.killTimer != nil {
		p.killTimer.Stop()
	}
	p.out.flush()
	if s.cur != p {
		return
	}
	s.cur = nil
	s.removePIDFile()
	s.st.PID, s.st.Engine = 0, EngineStatus{}
	if s.nextOptions != nil {
		s.st.Options, s.nextOptions = *s.nextOptions, nil
	}
	s.st.LastExit = describeExit(err)
	s.logf("the engine exited (%s)", s.st.LastExit)
	switch {
	case p.stopping:
		s.st.State, s.st.Killed, s.st.Message = Stopped, p.killed, ""
		if s.closing {
			s.finish()
			return
		}
		if s.pendingStart {
			s.pendingStart = false
			s.start()
			return
		}
		s.publish()
	case p.out.sawPortInUse():
		s.failPortInUse()
	case refused(p, err):
		// lily serve exits 1 with a "lily: …" line when its options are wrong, before it
		// listens; starting it again would only fail the same way.
		s.fail(CannotRun, "The engine refused to start: "+p.out.lastError())
	default:
		s.crashed(p)
	}
}

// refused reports an engine that exited with status 1 and an error line before ever answering
// /status. Go panics and fatal signals exit differently and count as crashes.
func refused(p *process, err error) bool {
	var ee *exec.ExitError
	return !p.answered && !p.hung && errors.As(err, &ee) && ee.ExitCode() == 1 && p.out.lastError() != ""
}

func describeExit(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &ee):
		return ee.String()
	}
	return err.Error()
}

func (s *Supervisor) crashed(p *process) {
	if s.cfg.Now().Sub(p.started) >= s.cfg.StableAfter {
		s.st.Crashes = 0
	}
	s.st.Crashes++
	why := p.out.lastError()
	if p.hung {
		why = fmt.Sprintf("it stopped answering for %s", s.cfg.HangTimeout)
	}
	if why == "" {
		why = s.st.LastExit
	}
	if s.st.Crashes > s.cfg.MaxRestarts {
		s.fail(CrashLoop, fmt.Sprintf("The engine crashed %d times in a row (%s).", s.st.Crashes, why))
		return
	}
	d := s.backoff(s.st.Crashes)
	s.st.State, s.st.RetryIn, s.st.Message = Restarting, d, "The engine stopped unexpectedly ("+why+")."
	s.logf("crash %d in a row; restarting in %s", s.st.Crashes, d)
	s.cancelRestart()
	gen := s.restartGen
	s.restartTimer = time.AfterFunc(d, func() {
		s.post(func() {
			if s.restartGen == gen && s.st.State == Restarting && s.cur == nil {
				s.launch()
			}
		})
	})
	s.publish()
}

// backoff is BackoffMin doubled for each crash after the first, capped at BackoffMax.
func (s *Supervisor) backoff(crashes int) time.Duration {
	d := s.cfg.BackoffMin
	for i := 1; i < crashes && d < s.cfg.BackoffMax; i++ {
		d *= 2
	}
	return min(d, s.cfg.BackoffMax)
}

func (s *Supervisor) failPortInUse() {
	o := s.st.Options
	s.st.OtherLily = answersLikeLily(o, 500*time.Millisecond)
	s.st.SuggestedPort = s.freePortAfter(o.Host, o.Port)
	var msg string
	if s.st.OtherLily {
		msg = fmt.Sprintf("Another Lily engine is already serving on port %d (a `lily serve` in Terminal?).", o.Port)
	} else {
		msg = fmt.Sprintf("Port %d is in use by another program.", o.Port)
	}
	if s.st.SuggestedPort != 0 {
		msg += fmt.Sprintf(" Port %d is free.", s.st.SuggestedPort)
	} else {
		msg += " Quit that program, or choose another port in settings.json."
	}
	s.fail(PortInUse, msg)
}

// freePortAfter finds a free port among the next 50.
func (s *Supervisor) freePortAfter(host string, port int) int {
	for p := port + 1; p <= port+50 && p <= 65535; p++ {
		if s.cfg.PortCheck(host, p) == nil {
			return p
		}
	}
	return 0
}

func (s *Supervisor) pollTimeout() time.Duration {
	return min(max(4*s.cfg.PollInterval, 250*time.Millisecond), 5*time.Second)
}

// SetMenuOpen says whether the menu is open: while it is, /status is read every PollInterval
// even when the engine is Ready (the menu shows its numbers), and opening it reads it at once.
func (s *Supervisor) SetMenuOpen(open bool) {
	s.mu.Lock()
	s.menuOpen = open
	s.mu.Unlock()
	if open {
		s.wakePoll()
	}
}

// wakePoll has the poller read /status now.
func (s *Supervisor) wakePoll() {
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// PollEvery is how long the poller waits before the next /status read: fast while the engine
// starts, loads, fails or stops (the menu follows its progress) or while the menu is open; idle
// once it is Ready and nobody looks, so a Mac that serves all day is not woken twice a second.
func PollEvery(st State, menuOpen bool, fast, idle time.Duration) time.Duration {
	if st == Ready && !menuOpen {
		return max(idle, fast)
	}
	return fast
}

func (s *Supervisor) nextPoll() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return PollEvery(s.snap.State, s.menuOpen, s.cfg.PollInterval, s.cfg.IdlePoll)
}

// poll reads /status every nextPoll until ctx ends, and at once when the menu opens.
func (s *Supervisor) poll(ctx context.Context, p *process, o Options) {
	client := &http.Client{Timeout: s.pollTimeout(), Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	t := time.NewTimer(s.cfg.PollInterval)
	defer t.Stop()
	for {
		st, err := fetchStatus(ctx, client, o)
		if ctx.Err() != nil {
			return
		}
		if !s.post(func() { s.onStatus(p, st, err) }) {
			return
		}
		t.Reset(s.nextPoll())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
	}
}

func (s *Supervisor) onStatus(p *process, st EngineStatus, err error) {
	if s.cur != p || p.stopping || p.exited {
		return
	}
	now := s.cfg.Now()
	if err != nil {
		since := p.started
		if p.answered {
			since = p.lastAnswer
		}
		if s.cfg.HangTimeout > 0 && !p.hung && now.Sub(since) > s.cfg.HangTimeout {
			p.hung = true
			s.logf("the engine has not answered /status for %s (%v): SIGKILL", s.cfg.HangTimeout, err)
			p.cmd.Process.Kill()
		}
		return
	}
	p.answered, p.lastAnswer = true, now
	s.st.Engine = st
	switch st.Phase {
	case "ready", "unloaded": // unloaded still serves: the next request loads the model
		s.st.State, s.st.Message = Ready, ""
	case "error":
		if s.st.State != EngineError || s.st.Message != Retrying {
			s.st.Message = st.Error
		}
		s.st.State = EngineError
	default:
		s.st.State, s.st.Message = Loading, ""
	}
	s.publish()
}

// lockedWriter serialises writes from the loop and the engine's output copier.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// pid file: lets the next app run stop an engine this run left behind.

func (s *Supervisor) writePIDFile(pid int) {
	if s.cfg.PIDFile == "" {
		return
	}
	os.MkdirAll(filepath.Dir(s.cfg.PIDFile), 0o755)
	if err := os.WriteFile(s.cfg.PIDFile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		s.logf("pid file: %v", err)
	}
}

func (s *Supervisor) removePIDFile() {
	if s.cfg.PIDFile != "" {
		os.Remove(s.cfg.PIDFile)
	}
}

// stopOrphan stops an engine that an earlier run of the app started and left behind (the app
// crashed or was killed): the pid file names it, the process still runs under the engine's name,
// and it answers /health on our port. Anything less certain is left alone; the port check then
// explains the clash.
func (s *Supervisor) stopOrphan(o Options) {
	if s.cfg.PIDFile == "" {
		return
	}
	data, err := os.ReadFile(s.cfg.PIDFile)
	if err != nil {
		return
	}
	os.Remove(s.cfg.PIDFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 || pid == os.Getpid() {
		return
	}
	name, err := processName(pid)
	base := filepath.Base(s.cfg.Engine)
	if err != nil || name == "" || !strings.HasPrefix(base, name) || !answersLikeLily(o, 500*time.Millisecond) {
		return
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		return
	}
	s.logf("stopping the engine left over from an earlier run (pid %d)", pid)
	s.st.Message = "Stopping an engine left over from an earlier run…"
	s.publish()
	proc.Signal(syscall.SIGTERM)
	if !s.waitPortFree(o, s.cfg.StopTimeout) {
		proc.Kill()
		s.waitPortFree(o, 2*time.Second)
	}
	s.st.Message = ""
}

func (s *Supervisor) waitPortFree(o Options, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if s.cfg.PortCheck(o.Host, o.Port) == nil {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
