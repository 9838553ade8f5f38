package draft

import "math"

// Group is one sequence's rows in a step: Rows consecutive positions (the token plain decoding
// chooses and the drafts after it) following Ctx positions already cached.
type Group struct{ Rows, Ctx int }

// Cost prices a step whose rows are grouped by sequence: the backend's model of its multi-row
// step, in seconds or any unit proportional to them. The gate calls Step for every plan it
// weighs, so it must be cheap; it must not keep groups.
type Cost interface {
	Step(groups []Group) float64
}

// LinearCost prices a step by its rows, as on a backend whose step costs about the same per row
// whatever the rows are (the CPU backend reads its weights again for every row). Under it K
// drafts cost K+1 rows for at most K+1 tokens, so drafting never beats plain decoding by the
// margin: the gate never drafts there.
type LinearCost struct{}

// Step is the step's rows.
func (LinearCost) Step(groups []Group) float64 {
	n := 0
	for _, g := range groups {
		n += g.Rows
	}
	return float64(n)
}

// The gate's defaults.
const (
	// DefaultMargin: a plan with drafts must promise 5 % more tokens per unit cost than plain
	// decoding. The cost model and the drafters' estimates both err by a few per cent, and a
	// plan that only breaks even is all risk: a wrong estimate makes it a loss.
	DefaultMargin = 0.05
	// DefaultStretch bounds what a step's drafts may cost the sequences in it: no sequence's
	// expected time per token may exceed 1.5 times what plain decoding gives it (the plain step
	// over its one token). A sequence that drafts nothing waits on the whole step for its one
	// token, so beside drafters its step may grow by at most half (its inter-token latency by
	// at most 50 %, its rate at least two thirds of plain); a sequence alone is never held
	// back by it, as the margin already promises it more than plain.
	DefaultStretch = 1.5
)

// Candidate is a running sequence as the gate sees it for one step.
type Candidate struct {
	// Track is the sequence's gate state (backoff), kept by the caller for the sequence's
	// life; nil: the sequence does not draft.
	Track *Track
	// Ctx is the positions it has cached before the step.
	Ctx int
	// Draft is its drafter's proposal (empty: nothing to draft). Tokens without an acceptance
	// estimate are never drafted: a drafter that knows nothing yet (cold) gives none, so the
	// sequence decodes plainly.
	Draft Proposal
}

// Gate decides how many drafted tokens each sequence verifies in a step: the K per sequence
// that maximise the step's expected tokens per unit cost within the row budget (MaxRows), the
// stretch bound and the margin, and none for a sequence that backs off (Observe). One goroutine
// uses it (the engine loop): it keeps scratch space between calls.
type Gate struct {
	Cost Cost
	// Margin and Stretch: DefaultMargin and DefaultStretch (NewGate).
	Margin, Stretch float64
	// Rows is the step's row budget, the most rows the backend runs together (0 or more than
	// MaxRows: MaxRows).
	Rows int

	groups []Group
	seqs   []seqPlan
	ks     []int
	best   plan
	plain  float64 // the last plan's plain cost (every K = 0)
}

// seqPlan is a candidate's part of a search: its expected tokens cum[k] when it drafts k
// (cum[0] = 1) and the most it may draft.
type seqPlan struct {
	cum  [MaxRows]float64
	maxK int
}

// plan is a searched plan's figures: its cost, expected tokens and tokens per unit cost.
type plan struct {
	cost, tokens, rate float64
}

// NewGate is a gate over cost with the default margin and stretch bound.
func NewGate(cost Cost) *Gate {
	return &Gate{Cost: cost, Margin: DefaultMargin, Stretch: DefaultStretch}
}

// Choose returns each candidate's K (appended to ks[:0], in cands' order): 0 for every one
// unless a plan with drafts beats plain decoding by the margin. For the plan it picks it
// records, in each drafting candidate's Track, what its drafts must earn (Observe).
func (g *Gate) Choose(cands []Candidate, ks []int) []int {
	ks = ks[:0]
	for range cands {
		ks = append(ks, 0)
	}
	n := len(cands)
	g.best, g.plain = plan{}, 0
	if n == 0 || g.Cost == nil {
		return ks
	}
	g.prepare(cands)
	g.plain = g.Cost.Step(g.groups)
	g.best = plan{cost: g.plain, tokens: float64(n), rate: float64(n) / g.plain}
	if n >= g.rows() || !(g.plain > 0) || !g.anyDraft() {
		return ks
	}
	g.ks = append(g.ks[:0], ks...)
	floor := g.best.rate * (1 + g.Margin)
	if g.search(0, g.rows()-n, 0, math.Inf(1), floor, ks) {
		g.record(cands, ks)
	}
	return ks
}

// rows is the row budget: Rows within 1 … MaxRows.
func (g *Gate) rows() int {
	if g.Rows <= 0 {
		return MaxRows
	}
	return min(g.Rows, MaxRows)
}

// Planned is the last Choose's plan: its cost, plain decoding's cost for the same sequences
// (every K = 0), and the tokens it expects. A caller without a measured cost in the Cost's
// units passes cost to Observe.
func (g *Gate) Planned() (cost, plain, tokens float64) {
	return g.best.cost, g.plain, g.best.tokens
}

// prepare fills the gate's groups (one row each) and each candidate's expected tokens.
func (g *Gate) prepare(cands []Candidate) {
	n := len(cands)
	g.groups = g.groups[:0]
	if cap(g.seqs) < n {
		g.seqs = make([]seqPlan, n)
	}
	g.seqs = g.seqs[:n]
	spare := max(g.rows()-n, 0)
	for i, c := range cands {
		g.groups = append(g.groups, Group{Rows: 1, Ctx: c.Ctx})
		s := &g.seqs[i]
		s.cum[0], s.maxK = 1, 0
		if c.Track == nil {
			continue
		}
		c.Track.rest, c.Track.restRate = 0, 0
		if c.Track.pause > 0 {
			continue
		}
		s.maxK = min(len(c.Draft.Tokens), len(c.Draft.Accept), spare)
		p := 1.0
		for k := 1; k <= s.maxK; k++ {
			a := c.Draft.Accept[k-1]
			if !(a > 0) { // zero, negative or NaN: nothing past it can be accepted
				s.maxK = k - 1
				break
			}
			p *= min(a, 1)
			s.cum[k] = s.cum[k-1] + p
		}
	}
}

// anyDraft reports whether some candidate may draft.
func (g *Gate) anyDraft() bool {
	for i := range g.seqs {
		if g.seqs[i].maxK > 0 {
			return true
		}
	}
	return false
}

// search tries every K for candidates i.. (spare rows left, tokens the expected tokens of those
// before i, least the smallest of their expected tokens), keeping in ks the best plan whose rate
// reaches floor and whose stretch is within the bound; it reports whether it found one. At most
// MaxRows candidates share MaxRows-n spare rows: 70 plans at worst (4 sequences).
func (g *Gate) search(i, spare int, tokens, least, floor float64, ks []int) bool {
	if i == len(g.seqs) {
		return g.weigh(tokens, least, floor, ks)
	}
	s := &g.seqs[i]
	found := false
	for k := 0; k <= min(s.maxK, spare); k++ {
		g.ks[i] = k
		g.groups[i].Rows = k + 1
		if g.search(i+1, spare-k, tokens+s.cum[k], min(least, s.cum[k]), floor, ks) {
			found = true
		}
	}
	g.ks[i], g.groups[i].Rows = 0, 1
	return found
}

// weigh prices the plan in g.ks and keeps it in ks when it is the best yet: within the stretch
// bound (the sequence expecting fewest tokens, least, gets each at most Stretch times its plain
// cost), at least floor tokens per unit cost, and more than the best so far.
func (g *Gate) weigh(tokens, least, floor float64, ks []int) bool {
	c := g.Cost.Step(g.groups)
	if !(c > 0) || c > g.Stretch*g.plain*least {
		return false
	}
	rate := tokens / c
	if rate < floor || rate <= g.best.rate {
		return false
	}
	g.best = plan{cost: c, tokens: tokens, rate: rate}
	copy(ks, g.ks)
	return true
}

// record sets the groups to the chosen plan and records in each drafting candidate's Track what
// its drafts must earn: the plan without them (its K = 0) expects rest tokens at restRate per
// unit cost, so its drafts pay for their rows if they bring at least restRate·cost − rest
// accepted tokens (cost: the step's).
func (g *Gate) record(cands []Candidate, ks []int) {
	for i, k := range ks {
		g.groups[i].Rows = k + 1
	}
	for i, k := range ks {
		if k == 0 {
			continue
		}
		g.groups[i].Rows = 1
		without := g.Cost.Step(g.groups)
		g.groups[i].Rows = k + 1
		t := cands[i].Track
		t.rest = g.best.tokens - g.seqs[i].cum[k] + 1
		t.restRate = t.rest / without
	}
}
