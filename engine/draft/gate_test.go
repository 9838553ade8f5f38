package draft

import (
	"math"
	"math/rand/v2"
	"testing"
)

// docCost is a bytes-only estimate of this model's step on Apple GPUs, in GB: the non-routed
// weights (1.104) once, the routed experts (0.566 for one row's 8) as the union of the rows'
// under uniform routing over 256, each sequence's DeltaNet state (0.126) once and its KV
// (20.5 kB a position) once for all its rows. It makes one row of a sequence 1.31× the
// one-row step at two rows, 1.89× at four, 2.95× at eight.
type docCost struct{}

var doc docCost

func (docCost) Step(groups []Group) float64 {
	rows, gb := 0, 1.104
	for _, g := range groups {
		rows += g.Rows
		gb += 0.126 + 20.5e-6*float64(g.Ctx+g.Rows)
	}
	union := 256 * (1 - math.Pow(1-8.0/256, float64(rows)))
	return gb + 0.566*union/8
}

// proposal is n drafted tokens each accepted with probability a given the ones before.
func proposal(n int, a float64) Proposal {
	p := Proposal{Tokens: make([]int, n), Accept: make([]float64, n)}
	for i := range p.Accept {
		p.Tokens[i], p.Accept[i] = i, a
	}
	return p
}

// streams is n candidates with fresh tracks, each with proposal p, at ctx positions.
func streams(n, ctx int, p Proposal) []Candidate {
	cs := make([]Candidate, n)
	for i := range cs {
		cs[i] = Candidate{Track: &Track{}, Ctx: ctx, Draft: p}
	}
	return cs
}

// expected is the plan's expected tokens, the least of any sequence, and its groups.
func expected(cs []Candidate, ks []int) (total, least float64, gs []Group) {
	least = math.Inf(1)
	for i, c := range cs {
		e, p := 1.0, 1.0
		for _, a := range c.Draft.Accept[:ks[i]] {
			p *= a
			e += p
		}
		total, least = total+e, min(least, e)
		gs = append(gs, Group{Rows: ks[i] + 1, Ctx: c.Ctx})
	}
	return total, least, gs
}

func plainGroups(cs []Candidate) []Group {
	return func() []Group { _, _, gs := expected(cs, make([]int, len(cs))); return gs }()
}

// TestGateLoneStream: one sequence drafts several tokens when they are likely accepted, none
// when they are not, none without acceptance estimates (cold) or a track, and never more
// than it has.
func TestGateLoneStream(t *testing.T) {
	g := NewGate(docCost{})
	one := func(c Candidate) int { return g.Choose([]Candidate{c}, nil)[0] }
	if k := one(streams(1, 500, proposal(7, 0.9))[0]); k < 3 {
		t.Errorf("acceptance 0.9: K %d", k)
	}
	if k := one(streams(1, 500, proposal(7, 0.2))[0]); k != 0 {
		t.Errorf("acceptance 0.2: K %d", k)
	}
	cold := Candidate{Track: &Track{}, Ctx: 500, Draft: Proposal{Tokens: []int{1, 2, 3}}}
	if k := one(cold); k != 0 {
		t.Errorf("no estimates: K %d", k)
	}
	if k := one(Candidate{Ctx: 500, Draft: proposal(7, 0.9)}); k != 0 {
		t.Errorf("no track: K %d", k)
	}
	if k := one(streams(1, 500, proposal(2, 0.99))[0]); k != 2 {
		t.Errorf("two tokens at 0.99: K %d", k)
	}
	p := proposal(7, 0.95)
	p.Accept[2] = 0 // nothing after a token that is never accepted
	if k := one(Candidate{Track: &Track{}, Ctx: 500, Draft: p}); k != 2 {
		t.Errorf("third token never accepted: K %d", k)
	}
}

// TestGateSharesRows: four sequences that would each draft several alone share the step's
// MaxRows: each drafts fewer, but drafting still pays.
func TestGateSharesRows(t *testing.T) {
	g := NewGate(docCost{})
	alone := g.Choose(streams(1, 500, proposal(7, 0.9)), nil)[0]
	cs := streams(4, 500, proposal(7, 0.9))
	ks := g.Choose(cs, nil)
	rows, drafted := 0, 0
	for _, k := range ks {
		rows += k + 1
		drafted += k
		if k >= alone {
			t.Errorf("4 streams: K %v, alone %d", ks, alone)
		}
	}
	if rows > MaxRows || drafted == 0 {
		t.Errorf("4 streams: K %v (%d rows)", ks, rows)
	}
}

// TestGateMargin: a lone sequence whose best plan (K = 1 at acceptance 0.35: 1.35 tokens for
// 1.31 times the step) beats plain decoding by less than the margin decodes plainly; without
// the margin it drafts.
func TestGateMargin(t *testing.T) {
	cs := streams(1, 500, proposal(7, 0.35))
	g := NewGate(docCost{})
	if k := g.Choose(cs, nil)[0]; k != 0 {
		t.Errorf("speed-up below the margin: K %d", k)
	}
	g.Margin = 0
	if k := g.Choose(cs, nil)[0]; k != 1 {
		t.Errorf("no margin: K %d", k)
	}
}

// TestGateStretch: beside a sequence with nothing to draft, a sequence with likely drafts may
// grow the step by at most the stretch bound, which binds here: unbounded it drafts more.
func TestGateStretch(t *testing.T) {
	cs := []Candidate{{Track: &Track{}, Ctx: 500, Draft: proposal(7, 0.95)}, {Track: &Track{}, Ctx: 800}}
	g := NewGate(docCost{})
	ks := g.Choose(cs, nil)
	_, _, gs := expected(cs, ks)
	plain := doc.Step(plainGroups(cs))
	if ks[1] != 0 || ks[0] == 0 || doc.Step(gs) > DefaultStretch*plain {
		t.Errorf("K %v: step %g, plain %g", ks, doc.Step(gs), plain)
	}
	g.Stretch = 100
	if free := g.Choose(cs, nil); free[0] <= ks[0] {
		t.Errorf("without the bound K %v, with it %v", free, ks)
	}
}

// TestGateRandom: on random steps (1 to 8 sequences, proposals of 0 to 8 tokens, acceptance
// estimates and contexts at random), every plan keeps the row budget, the proposals' lengths,
// the stretch bound and the margin, and is the best plan that does, found here by counting
// through every K vector.
func TestGateRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	g := NewGate(docCost{})
	var ks []int
	drafted := 0
	for range 2000 {
		cs := make([]Candidate, 1+r.IntN(MaxRows))
		for i := range cs {
			p := proposal(r.IntN(9), 0)
			for j := range p.Accept {
				p.Accept[j] = r.Float64()
			}
			cs[i] = Candidate{Track: &Track{}, Ctx: r.IntN(40000), Draft: p}
		}
		ks = g.Choose(cs, ks)
		rate := func(ks []int) float64 { e, _, gs := expected(cs, ks); return e / doc.Step(gs) }
		want, wantRate := bestByCounting(cs, g), rate(make([]int, len(cs)))
		if want != nil {
			wantRate = rate(want)
		}
		if got := rate(ks); math.Abs(got-wantRate) > 1e-12*wantRate {
			t.Fatalf("K %v at %g tokens per GB; best by counting %v at %g", ks, got, want, wantRate)
		}
		checkPlan(t, g, cs, ks)
		for _, k := range ks {
			drafted += k
		}
	}
	if drafted == 0 {
		t.Error("never drafted")
	}
}

// bestByCounting is the K vector within the budget, the proposals, the stretch bound and the
// margin with the most tokens per unit cost (nil: none beats plain decoding by the margin).
func bestByCounting(cs []Candidate, g *Gate) []int {
	n := len(cs)
	plain := doc.Step(plainGroups(cs))
	var best []int
	bestRate := float64(n) / plain * (1 + g.Margin)
	ks, base := make([]int, n), MaxRows-n+1 // K of 0 to the spare rows each
	for code := 0; code < int(math.Pow(float64(base), float64(n))); code++ {
		rows, ok := 0, true
		for i, c := 0, code; i < n; i, c = i+1, c/base {
			ks[i] = c % base
			rows += ks[i] + 1
			ok = ok && ks[i] <= len(cs[i].Draft.Tokens)
		}
		if !ok || rows > MaxRows {
			continue
		}
		e, least, gs := expected(cs, ks)
		c := doc.Step(gs)
		if c <= g.Stretch*plain*least && e/c >= bestRate && (best == nil || e/c > bestRate) {
			best, bestRate = append([]int(nil), ks...), e/c
		}
	}
	return best
}

// checkPlan: a plan with drafts keeps the row budget, the proposals' lengths and the stretch
// bound, and beats plain decoding's tokens per unit cost by the margin.
func checkPlan(t *testing.T, g *Gate, cs []Candidate, ks []int) {
	t.Helper()
	e, least, gs := expected(cs, ks)
	plain, rows := doc.Step(plainGroups(cs)), 0
	for i, k := range ks {
		rows += k + 1
		if k > len(cs[i].Draft.Tokens) {
			t.Fatalf("K %v for proposals of %d tokens at %d", ks, len(cs[i].Draft.Tokens), i)
		}
	}
	if e == float64(len(cs)) {
		return // plain decoding
	}
	c := doc.Step(gs)
	if rows > MaxRows || c > g.Stretch*plain*least || e/c < (1+g.Margin)*float64(len(cs))/plain {
		t.Fatalf("K %v: %d rows, cost %g (plain %g), %g tokens (least %g)", ks, rows, c, plain, e, least)
	}
}

// TestGatePlanned: Planned reports the chosen plan's cost, plain decoding's and the plan's
// expected tokens.
func TestGatePlanned(t *testing.T) {
	g := NewGate(doc)
	cs := streams(2, 3000, proposal(7, 0.9))
	ks := g.Choose(cs, nil)
	e, _, gs := expected(cs, ks)
	cost, plain, tokens := g.Planned()
	if cost != doc.Step(gs) || plain != doc.Step(plainGroups(cs)) || math.Abs(tokens-e) > 1e-12 || cost <= plain {
		t.Errorf("K %v: planned %g, %g, %g; want %g, %g, %g", ks, cost, plain, tokens, doc.Step(gs), doc.Step(plainGroups(cs)), e)
	}
}

// TestGateBackoff: a sequence whose drafts pay keeps drafting; when they stop paying it
// pauses for PauseSteps plain steps, its probes after each pause that fail again within
// JudgeAfter drafting steps double the pause, and a probe that lasts a whole Window resets it.
func TestGateBackoff(t *testing.T) {
	g := NewGate(doc)
	tr := &Track{}
	cs := []Candidate{{Track: tr, Ctx: 500, Draft: proposal(7, 0.9)}}
	step := func(accepted func(k int) int) int {
		k := g.Choose(cs, nil)[0]
		cost, _, _ := g.Planned()
		g.Observe(tr, k, accepted(k), cost)
		return k
	}
	all, none := func(k int) int { return k }, func(int) int { return 0 }
	// run takes steps with accepted until the sequence stops drafting: the drafting steps it
	// took and then the plain steps until it drafts again.
	run := func(accepted func(int) int) (drafting, plain int) {
		for ; step(accepted) > 0; drafting++ {
			if drafting > 1000 {
				t.Fatal("never backed off")
			}
		}
		for plain = 1; tr.Paused(); plain++ {
			step(none)
		}
		return drafting, plain
	}
	for range 3 * Window {
		if step(all) == 0 {
			t.Fatal("drafts that all pay: stopped")
		}
	}
	drafting, plain := run(none)
	if drafting < JudgeAfter || drafting >= Window || plain != PauseSteps {
		t.Errorf("after drafts that paid: %d drafting steps, then %d plain", drafting, plain)
	}
	for _, pause := range []int{2 * PauseSteps, 4 * PauseSteps} {
		if drafting, plain := run(none); drafting != JudgeAfter || plain != pause {
			t.Errorf("a failed probe: %d drafting steps, then %d plain; want %d, then %d", drafting, plain, JudgeAfter, pause)
		}
	}
	for range Window {
		if step(all) == 0 {
			t.Fatal("a probe that pays: stopped")
		}
	}
	if _, plain := run(none); plain != PauseSteps {
		t.Errorf("after a probe that paid: a pause of %d", plain)
	}
}

// TestGateBackoffCap: the pause doubles no further than MaxPauseSteps.
func TestGateBackoffCap(t *testing.T) {
	tr := &Track{}
	for range 20 {
		tr.backOff()
	}
	if tr.pause != MaxPauseSteps {
		t.Errorf("after 20 failed probes: a pause of %d", tr.pause)
	}
}

// TestLinearCost: where a step costs the same per row, no acceptance short of certainty makes
// drafting pay, nor does certainty beat the margin: the gate never drafts, alone or batched.
func TestLinearCost(t *testing.T) {
	if c := (LinearCost{}).Step([]Group{{3, 10}, {1, 0}, {4, 99}}); c != 8 {
		t.Errorf("8 rows: %g", c)
	}
	g := NewGate(LinearCost{})
	for _, n := range []int{1, 2, 4} {
		for _, a := range []float64{0.5, 0.9, 0.99, 1} {
			for i, k := range g.Choose(streams(n, 500, proposal(7, a)), nil) {
				if k != 0 {
					t.Errorf("%d streams at acceptance %g: stream %d drafts %d", n, a, i, k)
				}
			}
		}
	}
}

// BenchmarkChoose: the gate's search over the bytes estimate for n sequences with 7-token
// proposals (4 sequences have the most plans, 70; 8 have no spare row).
func BenchmarkChoose(b *testing.B) {
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(string(rune('0'+n))+"seq", func(b *testing.B) {
			g, cs := NewGate(doc), streams(n, 2000, proposal(7, 0.9))
			ks := make([]int, 0, n)
			b.ReportAllocs()
			for b.Loop() {
				ks = g.Choose(cs, ks)
			}
		})
	}
}

// TestGateBackoffPerSequence: beside a sequence whose drafts are all accepted, one whose drafts
// never are backs off alone: each is charged for its own rows.
func TestGateBackoffPerSequence(t *testing.T) {
	g := NewGate(doc)
	cs := streams(2, 500, proposal(7, 0.9))
	for range 2 * Window {
		ks := g.Choose(cs, nil)
		cost, _, _ := g.Planned()
		g.Observe(cs[0].Track, ks[0], ks[0], cost)
		g.Observe(cs[1].Track, ks[1], 0, cost)
	}
	if cs[0].Track.Paused() || !cs[1].Track.Paused() {
		t.Errorf("paused: accepting %v, failing %v", cs[0].Track.Paused(), cs[1].Track.Paused())
	}
}
