package runner

import (
	"cmp"
	"fmt"
	"sync/atomic"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/draft"
)

// Drafting modes (Options.Drafts.Mode).
const (
	DraftsOff    = "off"    // plain decoding
	DraftsAuto   = "auto"   // the cost gate decides each step (the default)
	DraftsAlways = "always" // draft whenever the drafter has a candidate, bypassing the gate (tests)
)

// DraftOptions configure speculative decoding (engine/draft). A drafted token is verified as a
// row of the step after its sequence's next token and kept only if it equals the token the
// sequence's own sampler, steer and stop rules choose there, so outputs are the same with
// drafting on and off; drafting only changes how many tokens a step yields.
type DraftOptions struct {
	Mode    string        // DraftsOff, DraftsAuto ("" too) or DraftsAlways
	Drafter draft.Drafter // nil: the suffix drafter
	// Cost prices the backend's steps for the gate (nil: draft.LinearCost, under which the gate
	// never drafts: a backend whose verify rows cost what plain rows do gains nothing).
	Cost draft.Cost
}

// CheckDrafts reports whether mode is a drafting mode.
func CheckDrafts(mode string) error {
	switch mode {
	case "", DraftsOff, DraftsAuto, DraftsAlways:
		return nil
	}
	return fmt.Errorf("drafts %q: expected auto, off or always", mode)
}

// DraftStats are the runner's drafting counters since it started.
type DraftStats struct {
	Drafter string
	// Mode is the drafting mode; Rows the step's row budget the gate shares among the sequences
	// (backend.Description.Rows); Priced what the gate prices steps by.
	Mode   string
	Rows   int
	Priced string
	// Steps are the sequence-steps that verified drafts; Drafted the tokens drafted in them,
	// Accepted those kept; Tokens the tokens those steps gave (accepted + one each).
	Steps, Drafted, Accepted, Tokens int64
	// K counts the sequence-steps by the drafts they verified: K[k], k = 1 … MaxRows−1.
	K [draft.MaxRows]int64
	// PlainCost and Cost are the modeled cost (the gate's Cost) of the tokens the steps with drafts
	// gave, decoded plainly and as they ran: PlainCost / Cost is the realised speed-up under the
	// model. Each sequence of such a step counts its share of the step (cost / sequences), and
	// its tokens at the plain step's cost per token.
	PlainCost, Cost float64
}

// drafting is the runner's drafting state: owned by the engine loop but for the counters.
type drafting struct {
	mode    string
	priced  string // what the gate's cost is (DraftStats.Priced)
	drafter draft.Drafter
	gate    *draft.Gate
	rows    int // the step's row budget (backend.Description.Rows, at most draft.MaxRows)
	cands   []draft.Candidate
	ks      []int
	groups  []draft.Group
	// The step planned: whether it drafts, its sequences, and its modeled cost plain and as run.
	drafting    bool
	n           int
	plain, cost float64

	steps, drafted, accepted, tokens atomic.Int64
	k                                [draft.MaxRows]atomic.Int64
	plainSum, costSum                atomic.Uint64 // in nanounits of the Cost
}

// newDrafting is the runner's drafting state over a backend described by desc: its row budget
// (Description.Rows) and, unless o gives one, its price of a step (Description.DraftCost).
func newDrafting(o DraftOptions, desc backend.Description) *drafting {
	if o.Mode == DraftsOff {
		return nil
	}
	d := &drafting{mode: o.Mode, drafter: o.Drafter, rows: draft.MaxRows}
	if desc.Rows > 0 {
		d.rows = min(desc.Rows, draft.MaxRows)
	}
	if d.mode == "" {
		d.mode = DraftsAuto
	}
	if d.drafter == nil {
		d.drafter = draft.NewSuffix(draft.SuffixOptions{})
	}
	cost := o.Cost
	d.priced = "the caller's cost"
	if cost == nil {
		cost, d.priced = desc.DraftCost, desc.DraftCostWhy
	}
	if cost == nil {
		cost = draft.LinearCost{}
		d.priced = "rows priced alike (" + cmp.Or(desc.DraftCostWhy, desc.Name+" runs a step's rows one after another") + "): the gate does not draft"
	}
	d.gate = draft.NewGate(cost)
	d.gate.Rows = d.rows
	return d
}

// seqDraft is a sequence's drafting state.
type seqDraft struct {
	stream draft.Stream
	track  draft.Track
	shadow draft.Shadow   // judges the proposals the step does not verify
	prop   draft.Proposal // this step's verified drafts (Tokens cut to K), for Feedback
	rows   [][]float32    // a verify step's logits rows, until pick takes them
	next   draft.Proposal // while the device generates: the stream's proposal after its last token
}

// start begins drafting for s (none when drafting is off).
func (d *drafting) start(s *seq) {
	if d != nil {
		s.draft = &seqDraft{stream: d.drafter.Start(s.req.Prompt)}
	}
}

// plan gives each decoding sequence its drafts for the step (seqDraft.prop), by the gate or, in
// DraftsAlways, as many as the drafter proposes within the step's rows; it reports whether any
// sequence drafts. extra is the step's other rows (a prefill slice).
func (d *drafting) plan(decoding []*seq, extra int) bool {
	if d == nil || len(decoding) == 0 {
		return false
	}
	d.cands = d.cands[:0]
	spare := d.rows - len(decoding) - extra
	for _, s := range decoding {
		s.draft.prop = draft.Proposal{}
		var p draft.Proposal
		if _, ok := s.sess.(backend.Verifier); ok && spare > 0 {
			p = s.draft.stream.Draft(spare)
		}
		d.cands = append(d.cands, draft.Candidate{Track: &s.draft.track, Ctx: len(s.req.Prompt) + s.consumed, Draft: p})
	}
	if d.mode == DraftsAlways {
		d.ks = d.ks[:0]
		for _, c := range d.cands {
			k := min(len(c.Draft.Tokens), max(spare, 0))
			spare -= k
			d.ks = append(d.ks, k)
		}
	} else {
		d.ks = d.gate.Choose(d.cands, d.ks)
	}
	d.drafting, d.n = false, len(decoding)
	for i, s := range decoding {
		p := d.cands[i].Draft
		if k := d.ks[i]; k > 0 {
			s.draft.prop = draft.Proposal{Tokens: p.Tokens[:k], Accept: p.Accept[:min(k, len(p.Accept))], Bucket: p.Bucket}
			d.drafting = true
		} else {
			s.draft.shadow.Offer(p)
		}
	}
	d.plain, d.cost = d.price(0), d.price(1)
	return d.drafting
}

// price is the modeled cost of the planned step's rows (drafts 0: without its drafts).
func (d *drafting) price(drafts int) float64 {
	d.groups = d.groups[:0]
	for i, c := range d.cands {
		d.groups = append(d.groups, draft.Group{Rows: 1 + drafts*d.ks[i], Ctx: c.Ctx})
	}
	return d.gate.Cost.Step(d.groups)
}

// verified records what a sequence's step gave: accepted of its k drafts kept, tokens the new
// tokens it committed (posted to its caller).
func (d *drafting) verified(s *seq, accepted int, tokens []int) {
	if d == nil || s.draft == nil {
		return
	}
	sd := s.draft
	sd.stream.Commit(tokens)
	sd.shadow.Commit(sd.stream, tokens)
	k := len(sd.prop.Tokens)
	d.gate.Observe(&sd.track, k, accepted, d.cost)
	if !d.drafting {
		return
	}
	addFloat(&d.plainSum, d.plain/float64(d.n)*float64(len(tokens)))
	addFloat(&d.costSum, d.cost/float64(d.n))
	if k == 0 {
		return
	}
	sd.stream.Feedback(sd.prop, accepted)
	d.steps.Add(1)
	d.drafted.Add(int64(k))
	d.accepted.Add(int64(accepted))
	d.tokens.Add(int64(accepted + 1))
	d.k[min(k, draft.MaxRows-1)].Add(1)
	sd.prop = draft.Proposal{}
}

// stats reads the counters.
func (d *drafting) stats() DraftStats {
	if d == nil {
		return DraftStats{}
	}
	st := DraftStats{Drafter: d.drafter.Name(), Mode: d.mode, Rows: d.rows, Priced: d.priced, Steps: d.steps.Load(), Drafted: d.drafted.Load(), Accepted: d.accepted.Load(), Tokens: d.tokens.Load(),
		PlainCost: float64(d.plainSum.Load()) / 1e9, Cost: float64(d.costSum.Load()) / 1e9}
	for i := range st.K {
		st.K[i] = d.k[i].Load()
	}
	return st
}

// addFloat adds x (≥ 0) to a nanounit counter.
func addFloat(a *atomic.Uint64, x float64) { a.Add(uint64(x * 1e9)) }

// DraftStats are the drafting counters (zero with drafting off).
func (r *Runner) DraftStats() DraftStats { return r.drafts.stats() }

// deviceToken records a token s generated on the device (a burst, which cannot verify drafts):
// its stream commits it, its backoff counts the step, and the stream's proposal after it goes to
// the shadow. It reports whether the gate would now draft for the bursting sequences ss, each
// with its latest proposal: the burst then ends, so the loop's next step can verify them.
func (d *drafting) deviceToken(s *seq, ss []*seq, id int) bool {
	if d == nil || s.draft == nil {
		return false
	}
	sd := s.draft
	sd.stream.Commit([]int{id})
	sd.shadow.Commit(sd.stream, []int{id})
	d.gate.Observe(&sd.track, 0, 0, 0)
	sd.next = draft.Proposal{}
	if _, ok := s.sess.(backend.Verifier); !ok {
		return false
	}
	sd.next = sd.stream.Draft(d.rows - len(ss))
	sd.shadow.Offer(sd.next)
	if d.mode != DraftsAuto || len(sd.next.Tokens) == 0 {
		return false
	}
	d.cands = d.cands[:0]
	for _, o := range ss {
		d.cands = append(d.cands, draft.Candidate{Track: &o.draft.track, Ctx: len(o.req.Prompt) + len(o.res.Tokens) - 1, Draft: o.draft.next})
	}
	for _, k := range d.gate.Choose(d.cands, d.ks) {
		if k > 0 {
			return true
		}
	}
	return false
}

// end settles s's drafting before its session is saved or closed: a verify whose rows nobody
// picked from (the sequence was stopped in between) keeps only the row's first token, the one
// the session counts as consumed; then the stream closes.
func (sd *seqDraft) end(sess backend.Session) error {
	if sd == nil {
		return nil
	}
	var err error
	if sd.rows != nil {
		sd.rows = nil
		if v, ok := sess.(backend.Verifier); ok && sess != nil {
			err = v.Keep(1)
		}
	}
	if sd.stream != nil {
		sd.stream.Close()
		sd.stream = nil
	}
	return err
}
