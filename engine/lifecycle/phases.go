package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

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
}

// State is the current phase and its progress, safe for concurrent use: steps update it while
// the server serializes it. Each phase transition is logged as one line.
type State struct {
	mu  sync.Mutex
	st  Status
	log io.Writer
}

// NewState starts in the checks phase, the first of serve's startup when it pulls the model (the
// checks run before the download), logging transitions to log (nil: stderr).
func NewState(log io.Writer) *State {
	if log == nil {
		log = os.Stderr
	}
	return &State{st: Status{Phase: PhaseChecks}, log: log}
}

// Status returns a copy of the current status.
func (s *State) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// MarshalJSON renders the current status.
func (s *State) MarshalJSON() ([]byte, error) { return json.Marshal(s.Status()) }

// Enter moves to phase p with a fresh progress, and logs the transition.
func (s *State) Enter(p Phase, detail string) {
	s.mu.Lock()
	s.st = Status{Phase: p, Detail: detail}
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
}

// Fail moves to the error phase, remembering which phase failed and why.
func (s *State) Fail(err error) {
	s.mu.Lock()
	failed := s.st.Phase
	s.st = Status{Phase: PhaseError, FailedPhase: failed, Error: err.Error()}
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

// PullIfMissing is the pull phase: nothing to do when dir holds a complete pull of repo@rev
// (checked without the network), else a resumable download reporting bytes to the state and
// each retry and wait to its log, so a stalled download says why it is slow in serve's log
// rather than looking frozen.
func PullIfMissing(c *hub.Client, repo, rev, dir string) Step {
	return Step{Phase: PhasePull, Run: func(ctx context.Context, s *State) error {
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
