package draft

// Backoff: a sequence whose drafts stop paying for their rows decodes plainly for a while, then
// tries again. Its drafts pay if the tokens they bring cover what their rows cost: the step
// without them (the sequence's K = 0) would have given rest tokens at restRate tokens per unit
// cost, so with them, at the step's cost c, they must bring at least restRate·c − rest accepted
// tokens. For a sequence alone this is its realised tokens per unit cost against its plain
// rate; beside others it charges the sequence only for its own rows, not for other drafters'.
const (
	// Window is the drafting steps a sequence's drafts are judged over (the most recent).
	Window = 16
	// JudgeAfter is the drafting steps after a start or a pause before the first judgement:
	// a probe that loses costs at most 4 steps (a lone sequence's 8-row step costs about three
	// plain ones, so about 8 plain steps lost at worst), and 4 steps see enough of a draft's
	// fate (each brings 0 to K tokens) to tell a draft that fails outright.
	JudgeAfter = 4
	// PauseSteps is the plain steps a sequence waits after its drafts failed to pay; each
	// failure of the probe that follows doubles it, up to MaxPauseSteps, so text where
	// drafting never pays costs a few per cent at most (8 lost plain steps per 1,024); a probe
	// that lasts a whole Window without failing resets it.
	PauseSteps    = 32
	MaxPauseSteps = 1024
)

// Track is one sequence's backoff state; its zero value is a sequence that may draft. The
// caller keeps one per sequence for its life and passes it to Choose and Observe.
type Track struct {
	// rest and restRate: what the sequence's drafts must earn in the step Choose last planned
	// (0: it planned none for it).
	rest, restRate float64
	// The last Window drafting steps: accepted tokens and the accepted tokens needed.
	acc, need [Window]float64
	n, next   int
	probe     int // drafting steps since the last pause ended (or the sequence started)
	pause     int // plain steps left before the sequence may draft again
	fails     int // failed probes in a row
}

// Paused reports whether the sequence is backing off (Choose gives it K = 0).
func (t *Track) Paused() bool { return t.pause > 0 }

// Observe reports a step of the sequence t: it verified k drafted tokens, accepted of which were
// kept, in a step that cost stepCost in the Cost's units (the plan's cost, Planned, or a
// measurement in the same units). The caller reports every step of the sequence, plain ones
// too: a pause counts them.
func (g *Gate) Observe(t *Track, k, accepted int, stepCost float64) {
	if t == nil {
		return
	}
	if k <= 0 {
		t.pause = max(t.pause-1, 0)
		return
	}
	if t.restRate <= 0 { // a draft the gate did not plan: nothing to judge it by
		return
	}
	t.acc[t.next] = float64(min(max(accepted, 0), k))
	t.need[t.next] = t.restRate*stepCost - t.rest
	t.next = (t.next + 1) % Window
	t.n = min(t.n+1, Window)
	t.probe++
	if t.n >= JudgeAfter && sum(t.acc[:t.n]) < sum(t.need[:t.n]) {
		t.backOff()
		return
	}
	if t.probe >= Window {
		t.fails = 0
	}
}

// backOff starts a pause: PauseSteps, doubled for each failed probe before it, at most
// MaxPauseSteps; the window starts afresh for the probe after it.
func (t *Track) backOff() {
	t.pause = PauseSteps
	for i := 0; i < t.fails && t.pause < MaxPauseSteps; i++ {
		t.pause *= 2
	}
	t.pause = min(t.pause, MaxPauseSteps)
	t.fails++
	t.n, t.next, t.probe = 0, 0, 0
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}
