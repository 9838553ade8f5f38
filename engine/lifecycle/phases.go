package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lilyformac/lily/engine/lifecycle/hub"
)

// Phase is a step of `lily serve`'s startup, as the status JSON names it.
type Phase string

const (
	// The doctor's checks that can stop a load. When serve pulls the model they run twice:
	// before the pull those that need no weights on disk (so a Mac that cannot run the model
	// learns it before the download), after verify all of them.
	PhaseChecks Phase = "checks"
	PhasePull   Phase = "pull"   // pull-if-missing: download the checkpoint unless it is complete
	PhaseVerify Phase = "verify" // check the files against the pull's marker
	PhaseLoad   Phase = "load"   // map the weights, build the GPU state
	PhaseWarm   Phase = "warm"   // a first forward pass, so the first request is not slow
	PhaseReady  Phase = "ready"
	PhaseError  Phase = "error" // see Status.FailedPhase and Status.Error; Runner.Retry starts over
	// PhaseUnloaded follows ready when serve --idle-unload released the idle model: the next
	// request loads it again (load, warm, ready).
	PhaseUnloaded Phase = "unloaded"
)

// Status is the JSON the menu-bar app reads. Every key is always present; error and
// failed_phase are "" unless phase is "error".
type Status struct {
	Phase       Phase   `json:"phase"`
	Progress    float64 `json:"progress"` // 0..1 within the phase; 0 when it has no measure
	Detail      string  `json:"detail"`
	Error       string  `json:"error"`
	FailedPhase Phase   `json:"failed_phase"`
	BytesDone   int64   `json:"bytes_done"`
	BytesTotal  int64   `json:"bytes_total"`
	File        string  `json:"file"` // the file being downloaded or hashed
	// While bytes are reported (pull, verify): the rate over the last RateWindow and the
	// seconds left at that rate (-1: not known yet, or nothing moving).
	BytesPerS  float64 `json:"bytes_per_s"`
	ETASeconds int64   `json:"eta_s"`
	// Retry is the pull's pending retry while no byte has arrived since it was scheduled
	// (null otherwise): the download is stalled, and says why and when it tries again.
	Retry *RetryStatus `json:"retry"`
}

// RetryStatus is a download retry as /status shows it.
type RetryStatus struct {
	Reason   string    `json:"reason"` // a few words: "HTTP 503", "no data", "connection refused"
	Error    string    `json:"error"`  // the failure in full
	Attempt  int       `json:"attempt"`
	Attempts int       `json:"attempts"` // retries allowed in a row without progress
	At       time.Time `json:"at"`       // when the next attempt starts
	InS      float64   `json:"in_s"`     // seconds until then, when the status was read (0: under way)
}

// RateWindow is how far back BytesPerS looks: long enough to smooth the bursts of parallel
// ranged requests, short enough that a slowdown shows within seconds (a rate since the start
// would hide a stall behind an hour of good speed).
const RateWindow = 15 * time.Second

// minRateSpan is the least history a rate is reported from: the first reports of a resumed pull
// would otherwise divide a burst by a few milliseconds.
const minRateSpan = 2 * time.Second

// maxSamples bounds the rate's history; reports come every 250 ms, so a window holds about 60.
const maxSamples = 256

type sample struct {
	at   time.Time
	done int64
}

// State is the current phase and its progress, safe for concurrent use: steps update it while
// the server serializes it. Each phase transition is logged as one line.
type State struct {
	mu  sync.Mutex
	st  Status
	log io.Writer
	now func() time.Time // the clock the rate and retry times read; tests set a fake one

	samples    []sample // byte counts of the current phase within RateWindow, oldest first
	retry      *RetryStatus
	retryBytes int64 // BytesDone at the first report after retry was scheduled (-1: none yet)
}

// NewState starts in the checks phase, the first of serve's startup when it pulls the model (the
// checks run before the download), logging transitions to log (nil: stderr).
func NewState(log io.Writer) *State {
	if log == nil {
		log = os.Stderr
	}
	return &State{st: Status{Phase: PhaseChecks}, log: log, now: time.Now}
}

// Status returns a copy of the current status, its rate and time left as of now.
func (s *State) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	now := s.now()
	st.BytesPerS, st.ETASeconds = s.rate(now), -1
	if left := st.BytesTotal - st.BytesDone; st.BytesPerS > 0 && left >= 0 {
		st.ETASeconds = int64(math.Ceil(float64(left) / st.BytesPerS))
	}
	if s.retry != nil {
		r := *s.retry
		r.InS = max(r.At.Sub(now).Seconds(), 0)
		st.Retry = &r
	}
	return st
}

// rate is bytes per second over the last RateWindow up to now: from the newest sample at or
// before the window's start (or the oldest kept) to the latest count. Dividing by the time to
// now, not to the latest report, lets the rate fall when reports stop coming.
func (s *State) rate(now time.Time) float64 {
	if len(s.samples) == 0 {
		return 0
	}
	base := s.samples[0]
	for _, x := range s.samples[1:] {
		if x.at.After(now.Add(-RateWindow)) {
			break
		}
		base = x
	}
	last := s.samples[len(s.samples)-1]
	span := now.Sub(base.at)
	if span < minRateSpan || last.done <= base.done {
		return 0
	}
	return float64(last.done-base.done) / span.Seconds()
}

// record adds a byte count to the rate's history, dropping what the window no longer needs.
func (s *State) record(done int64) {
	now := s.now()
	if n := len(s.samples); n > 0 && done < s.samples[n-1].done {
		s.samples = s.samples[:0] // bytes given back (a file failed its checksum): start over
	}
	s.samples = append(s.samples, sample{now, done})
	// Keep one sample at or before the window's start, as rate's base.
	drop := 0
	for drop+1 < len(s.samples) && !s.samples[drop+1].at.After(now.Add(-RateWindow)) {
		drop++
	}
	drop = max(drop, len(s.samples)-maxSamples)
	s.samples = append(s.samples[:0], s.samples[drop:]...)
}

// MarshalJSON renders the current status.
func (s *State) MarshalJSON() ([]byte, error) { return json.Marshal(s.Status()) }

// Enter moves to phase p with a fresh progress, and logs the transition.
func (s *State) Enter(p Phase, detail string) {
	s.mu.Lock()
	s.st = Status{Phase: p, Detail: detail}
	s.samples, s.retry = s.samples[:0], nil
	if p == PhaseReady {
		s.st.Progress = 1
	}
	s.mu.Unlock()
	s.logf("phase %s%s", p, parens(detail))
}

// SetProgress updates the current phase's fraction (clamped to 0..1) and detail.
func (s *State) SetProgress(fraction float64, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Progress = min(max(fraction, 0), 1)
	s.st.Detail = detail
}

// SetBytes updates progress from a byte count, as downloads and hashing report it.
func (s *State) SetBytes(done, total int64, file string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.BytesDone, s.st.BytesTotal, s.st.File = done, total, file
	if total > 0 {
		s.st.Progress = min(max(float64(done)/float64(total), 0), 1)
	}
	s.record(done)
	switch {
	case s.retry == nil:
	case s.retryBytes < 0:
		// The baseline is this report, not the one before the retry: bytes other streams
		// delivered before it was scheduled must not count as the download moving again.
		s.retryBytes = done
	case done > s.retryBytes:
		s.retry = nil // bytes flow again
	}
}

// SetRetry records a retry the pull is about to wait for; it shows in Status until a report
// after it counts more bytes than the first report after it, or the phase ends. With parallel
// streams one stream's retry is soon cleared by the others' bytes, so Retry means the download
// as a whole is stalled.
func (s *State) SetRetry(r hub.Retry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := ""
	if r.Err != nil {
		msg = r.Err.Error()
	}
	s.retry = &RetryStatus{Reason: r.Reason, Error: msg, Attempt: r.Attempt, Attempts: r.Attempts, At: s.now().Add(r.Wait)}
	s.retryBytes = -1
}

// Fail moves to the error phase, remembering which phase failed and why.
func (s *State) Fail(err error) {
	s.mu.Lock()
	failed := s.st.Phase
	s.st = Status{Phase: PhaseError, FailedPhase: failed, Error: err.Error()}
	s.samples, s.retry = s.samples[:0], nil
	s.mu.Unlock()
	s.logf("phase error (%s failed): %v", failed, err)
}

func (s *State) logf(format string, args ...any) {
	fmt.Fprintf(s.log, "lily: "+format+"\n", args...)
}

func parens(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// Step does the work of one phase, reporting progress through s.
type Step struct {
	Phase Phase
	Run   func(ctx context.Context, s *State) error
}

// Runner runs the startup steps in order, ending in ready or error.
type Runner struct {
	State   *State
	Steps   []Step
	running atomic.Bool
}

// ErrBusy is returned by Run and Retry while the steps are already running.
var ErrBusy = errors.New("startup is already running")

// Run executes every step in order; the first failure ends it in the error phase.
func (r *Runner) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrBusy
	}
	defer r.running.Store(false)
	for _, step := range r.Steps {
		r.State.Enter(step.Phase, "")
		if err := step.Run(ctx, r.State); err != nil {
			r.State.Fail(err)
			return fmt.Errorf("%s: %w", step.Phase, err)
		}
	}
	r.State.Enter(PhaseReady, "")
	return nil
}

// Retry starts over after a failure. It runs every step again rather than resuming at the one
// that failed: steps are cheap when their work is done (pull-if-missing finds the marker), and
// an earlier phase may be what repairs a later failure (a damaged file found while loading is
// re-verified and re-downloaded).
func (r *Runner) Retry(ctx context.Context) error {
	if st := r.State.Status(); st.Phase != PhaseError {
		return fmt.Errorf("nothing to retry: startup is in phase %s", st.Phase)
	}
	r.State.logf("retrying startup after %s failed", r.State.Status().FailedPhase)
	return r.Run(ctx)
}

// Hold keeps the Mac awake while work runs: called when it starts, the function it returns when
// it ends. serve passes mtl.BeginActivity, as it does for generating (runner.Options.Hold).
type Hold func(reason string) (release func())

// PullIfMissing is the pull phase: nothing to do when dir holds a complete pull of repo@rev
// (checked without the network), else a resumable download reporting bytes to the state and
// each retry and wait to its log and status, so a stalled download says why it is slow rather
// than looking frozen. hold (nil: none) is held for the whole phase and released however it
// ends: a 19 GB download takes long enough for an idle Mac to fall asleep in the middle.
func PullIfMissing(c *hub.Client, repo, rev, dir string, hold Hold) Step {
	return Step{Phase: PhasePull, Run: func(ctx context.Context, s *State) error {
		if hold != nil {
			defer hold("Downloading " + repo)()
		}
		cc := *c // the caller's client may be shared: report through a copy
		cc.Progress = func(p hub.Progress) {
			s.SetBytes(p.Done, p.Total, p.File)
			if c.Progress != nil {
				c.Progress(p)
			}
		}
		cc.Logf = func(format string, args ...any) {
			s.logf("pull: "+format, args...)
			if c.Logf != nil {
				c.Logf(format, args...)
			}
		}
		cc.Retrying = func(r hub.Retry) {
			s.SetRetry(r)
			if c.Retrying != nil {
				c.Retrying(r)
			}
		}
		_, err := cc.Pull(ctx, repo, rev, dir)
		return err
	}}
}

// VerifyStep is the verify phase: dir is checked against its marker (VerifyFast: sizes,
// VerifyFull: checksums). A directory without a marker is a checkpoint the user brought
// (--model DIR): there is nothing to verify against, which the detail says.
func VerifyStep(dir string, mode hub.VerifyMode) Step {
	return Step{Phase: PhaseVerify, Run: func(ctx context.Context, s *State) error {
		m, err := hub.Verify(ctx, dir, mode, func(p hub.Progress) { s.SetBytes(p.Done, p.Total, p.File) })
		if errors.Is(err, hub.ErrNotPulled) {
			s.SetProgress(1, "not pulled by lily: no "+hub.MarkerName+" to verify against")
			return nil
		}
		if err != nil {
			return err
		}
		s.SetProgress(1, fmt.Sprintf("%d files of %s@%s", len(m.Files), m.Repo, m.Revision))
		return nil
	}}
}
