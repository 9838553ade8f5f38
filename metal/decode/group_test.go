package decode

import (
	"math"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/draft"
	"github.com/lilyformac/lily/metal/plan"
)

func m4Max(t testing.TB) plan.Chip {
	chip, ok := plan.ChipNamed("M4 Max")
	if !ok {
		t.Fatal("no M4 Max")
	}
	return chip
}

func near(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b)) }

// TestGroupModelOneRow: one sequence's one row is the one-row plan's step at any context,
// including contexts between the two the model was derived from, for both KV formats.
func TestGroupModelOneRow(t *testing.T) {
	c, chip := config.Production(), m4Max(t)
	const maxCtx = 4096
	for _, kvBits := range []int{16, 8} {
		m, err := NewGroupModel(c, maxCtx, kvBits, chip)
		if err != nil {
			t.Fatal(err)
		}
		for _, ctx := range []int{0, 1, 1000, 2345, maxCtx - 1} {
			tctx := ctx
			if ctx == 0 {
				tctx = -1 // Options.TrafficCtx 0 means the last position
			}
			s, err := Build(c, Options{MaxCtx: maxCtx, TrafficCtx: tctx, KVBits: kvBits})
			if err != nil {
				t.Fatal(err)
			}
			st := s.Plan.Stats(ModeSample)
			g := []draft.Group{{Rows: 1, Ctx: ctx}}
			bytes, flops := m.Work(g)
			if math.Abs(bytes-float64(st.Bytes)) > 0.5 || !near(flops, st.FLOPs, 1e-12) {
				t.Errorf("kv%d ctx %d: model %.0f bytes %g FLOPs, the plan %d, %g", kvBits, ctx, bytes, flops, st.Bytes, st.FLOPs)
			}
			if got, want := m.Step(g), chip.Seconds(st.Bytes, st.FLOPs); !near(got, want, 1e-12) {
				t.Errorf("kv%d ctx %d: %g s, the plan's step %g s", kvBits, ctx, got, want)
			}
		}
	}
	if _, err := NewGroupModel(c, 1, 16, chip); err == nil {
		t.Error("a one-position model accepted")
	}
}

// TestGroupModelBatch: n sequences of one row each is BatchModel's multi-row step.
func TestGroupModelBatch(t *testing.T) {
	c, chip := config.Production(), m4Max(t)
	const ctx = 128
	m, err := NewGroupModel(c, ctx+1, 16, chip) // BatchModel's plans hold ctx+1 positions
	if err != nil {
		t.Fatal(err)
	}
	var gs []draft.Group
	for n := 1; n <= MaxRows; n++ {
		gs = append(gs, draft.Group{Rows: 1, Ctx: ctx})
		b, err := BatchModel(c, n, ctx, 16)
		if err != nil {
			t.Fatal(err)
		}
		bytes, flops := m.Work(gs)
		if math.Abs(bytes-float64(b.Bytes)) > 1 || !near(flops, b.FLOPs, 1e-12) {
			t.Errorf("%d rows: model %.0f bytes %g FLOPs, BatchModel %d, %g", n, bytes, flops, b.Bytes, b.FLOPs)
		}
	}
}

// TestGroupModelParts: the built multi-row plan (n sequences) moves n times the one-row plan's
// row and state parts, as the model assumes of rows and of sequences; a group's rows share its
// state and its cached KV, so a group of n rows costs less than n one-row sequences at the
// same context, by more at a longer context, and more than n-1 rows.
func TestGroupModelParts(t *testing.T) {
	c, chip := config.Production(), m4Max(t)
	const maxCtx = 8192
	m, err := NewGroupModel(c, maxCtx, 16, chip)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 5, MaxRows} {
		s, err := Build(c, Options{MaxCtx: maxCtx, TrafficCtx: 100, Rows: n})
		if err != nil {
			t.Fatal(err)
		}
		p := s.groupParts(ModeSample)
		if p[gRow]+p[gKVWrite] != int64(n)*m.Row || p[gSeq] != int64(n)*m.Seq || p[gShared] != m.Shared {
			t.Errorf("%d rows: row %d, state %d, shared %d; one row %d, %d, %d", n, p[gRow]+p[gKVWrite], p[gSeq], p[gShared], m.Row, m.Seq, m.Shared)
		}
		var saved [2]float64
		for i, ctx := range []int{100, 6000} {
			group := m.Step([]draft.Group{{Rows: n, Ctx: ctx}})
			fewer := m.Step([]draft.Group{{Rows: n - 1, Ctx: ctx}})
			apart := m.Step(repeat(draft.Group{Rows: 1, Ctx: ctx}, n))
			if !(fewer < group && group < apart) {
				t.Errorf("%d rows at %d: %g s; %d rows %g s; apart %g s", n, ctx, group, n-1, fewer, apart)
			}
			saved[i] = apart - group
		}
		if saved[1] <= saved[0] {
			t.Errorf("%d rows: grouping saves %g s at 100 positions, %g s at 6000", n, saved[0], saved[1])
		}
	}
}

func repeat(g draft.Group, n int) []draft.Group {
	out := make([]draft.Group, n)
	for i := range out {
		out[i] = g
	}
	return out
}

// TestGroupModelRatios: n rows of one sequence against its one-row step, on a 32k-position
// cache, against the ratios a bytes-only estimate gives for this model (non-routed weights,
// the routed experts' union, the DeltaNet state once and the KV once, nothing per row): 1.31,
// 1.89 and 2.95 at 2, 4 and 8 rows at a short context, 2.42 at 8 rows at 32k. Without its
// per-row traffic the model agrees within 1 %; with it (attention's split partials, which the
// plan counts for every split, logits, sampler buffers, activations) it is higher, within 5 %.
func TestGroupModelRatios(t *testing.T) {
	c, chip := config.Production(), m4Max(t)
	m, err := NewGroupModel(c, 32768+MaxRows, 16, chip)
	if err != nil {
		t.Fatal(err)
	}
	bare := *m
	bare.Row = 0
	for _, tc := range []struct {
		rows, ctx int
		want      float64
	}{{2, 128, 1.31}, {4, 128, 1.89}, {8, 128, 2.95}, {8, 32768, 2.42}} {
		ratio := func(m *GroupModel) float64 {
			return m.Step([]draft.Group{{Rows: tc.rows, Ctx: tc.ctx}}) / m.Step([]draft.Group{{Rows: 1, Ctx: tc.ctx}})
		}
		full, noRow := ratio(m), ratio(&bare)
		if !near(noRow, tc.want, 0.01) || !near(full, tc.want, 0.05) || full <= noRow {
			t.Errorf("%d rows at %d: %.3f× the one-row step (%.3f× without per-row traffic), want about %.2f×", tc.rows, tc.ctx, full, noRow, tc.want)
		}
	}
}

// TestGroupModelGate: the gate over the model of a 32k server on an M4 Max drafts several
// tokens for a lone sequence whose drafts are likely accepted, none for one whose drafts are
// not, and at least as many at a long context, where the KV read once makes rows cheaper.
func TestGroupModelGate(t *testing.T) {
	m, err := NewGroupModel(config.Production(), 32768+MaxRows, 16, m4Max(t))
	if err != nil {
		t.Fatal(err)
	}
	g := draft.NewGate(m)
	choose := func(accept float64, ctx int) int {
		p := draft.Proposal{Tokens: make([]int, 7), Accept: make([]float64, 7)}
		for i := range p.Accept {
			p.Accept[i] = accept
		}
		return g.Choose([]draft.Candidate{{Track: &draft.Track{}, Ctx: ctx, Draft: p}}, nil)[0]
	}
	short, long := choose(0.9, 128), choose(0.9, 32768)
	if short < 3 || long < short {
		t.Errorf("acceptance 0.9: K %d at 128 positions, %d at 32k", short, long)
	}
	if k := choose(0.2, 128); k != 0 {
		t.Errorf("acceptance 0.2: K %d", k)
	}
}

// BenchmarkGateChoose: the gate's search over the model, every step's cost: n sequences with
// 7-token proposals (4 sequences is the most plans: 70).
func BenchmarkGateChoose(b *testing.B) {
	m, err := NewGroupModel(config.Production(), 32768+MaxRows, 16, m4Max(b))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(map[int]string{1: "1seq", 2: "2seq", 4: "4seq", 8: "8seq"}[n], func(b *testing.B) {
			g := draft.NewGate(m)
			cands := make([]draft.Candidate, n)
			for i := range cands {
				p := draft.Proposal{Tokens: make([]int, 7), Accept: make([]float64, 7)}
				for j := range p.Accept {
					p.Accept[j] = 0.9 - 0.05*float64(i)
				}
				cands[i] = draft.Candidate{Track: &draft.Track{}, Ctx: 1000 * (i + 1), Draft: p}
			}
			ks := make([]int, 0, n)
			b.ReportAllocs()
			for b.Loop() {
				ks = g.Choose(cands, ks)
			}
		})
	}
}
