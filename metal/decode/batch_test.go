package decode

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/plan"
)

// TestBatchModelOneRow: a step over one sequence is the single-row step bench --plan reports:
// the same dispatches, barriers, bytes and FLOPs, its parts summing to its bytes.
func TestBatchModelOneRow(t *testing.T) {
	c := config.Production()
	for _, tc := range []struct{ ctx, kvBits int }{{128, 16}, {32768, 8}} {
		s, err := Build(c, Options{MaxCtx: tc.ctx + 1, TrafficCtx: tc.ctx, KVBits: tc.kvBits})
		if err != nil {
			t.Fatal(err)
		}
		st := s.Plan.Stats(ModeSample)
		b, err := BatchModel(c, 1, tc.ctx, tc.kvBits)
		if err != nil {
			t.Fatal(err)
		}
		if b.Dispatches != st.Dispatches || b.Barriers != st.Barriers || b.Bytes != st.Bytes || b.FLOPs != st.FLOPs || b.BytesPerToken() != st.Bytes {
			t.Errorf("ctx %d: one row %+v, the step %+v", tc.ctx, b, st)
		}
		if b.Experts != float64(c.TopK) || b.Shared+b.Routed+b.PerRow != b.Bytes {
			t.Errorf("ctx %d: one row's parts %+v", tc.ctx, b)
		}
	}
}

// TestRowParts: every dispatch's parts sum to its bytes, the routed experts' ranges are the K
// experts' gate, up and down rows of each layer, and the embedding row is a row's own.
func TestRowParts(t *testing.T) {
	c := config.Production()
	s, err := Build(c, Options{MaxCtx: 129, TrafficCtx: 128})
	if err != nil {
		t.Fatal(err)
	}
	class := s.rowClass()
	var routed int64
	for i := range s.Plan.Dispatches {
		d := &s.Plan.Dispatches[i]
		p := rowParts(d, class)
		if p[sharedPart]+p[routedPart]+p[rowPart] != d.Bytes() {
			t.Fatalf("dispatch %d (%s): parts %v, bytes %d", i, d.Kernel, p, d.Bytes())
		}
		if d.Kernel == "embed_q4" && (p[rowPart] == 0 || p[sharedPart] != 0) {
			t.Errorf("embed_q4: parts %v", p)
		}
		routed += p[routedPart]
	}
	// K experts × (gate + up: I rows of H; down: H rows of I) in 4-bit, group 64 with bf16
	// scale and bias, every layer.
	perMatrix := int64(c.MoEIntermediate) * int64(c.HiddenSize) * (4*64/8 + 4) / 64
	if want := int64(c.NumLayers*c.TopK*3) * perMatrix; routed != want {
		t.Errorf("routed expert bytes %d, want %d", routed, want)
	}
}

// TestBatchModelSublinear: more rows move more bytes per step but fewer per token: the built
// multi-row plan runs the single-row step's dispatches, reads the shared weights once, the
// routed experts as their union grows, and each row's own traffic once per row.
func TestBatchModelSublinear(t *testing.T) {
	c := config.Production()
	one, err := BatchModel(c, 1, 128, 16)
	if err != nil {
		t.Fatal(err)
	}
	prev := one
	for rows := 2; rows <= MaxRows; rows++ {
		b, err := BatchModel(c, rows, 128, 16)
		if err != nil {
			t.Fatal(err)
		}
		if b.Bytes <= prev.Bytes || b.Bytes >= int64(rows)*one.Bytes || b.BytesPerToken() >= prev.BytesPerToken() {
			t.Errorf("%d rows: %d bytes (%d a token) after %d (%d)", rows, b.Bytes, b.BytesPerToken(), prev.Bytes, prev.BytesPerToken())
		}
		wantRouted := math.Round(float64(one.Routed) * UnionExperts(c.NumExperts, c.TopK, rows) / float64(c.TopK))
		if b.Shared != one.Shared || b.PerRow != int64(rows)*one.PerRow || float64(b.Routed) != wantRouted {
			t.Errorf("%d rows: parts %+v against one row's %+v", rows, b, one)
		}
		if b.Dispatches != one.Dispatches || b.Barriers != one.Barriers || b.FLOPs != float64(rows)*one.FLOPs {
			t.Errorf("%d rows: %d dispatches, %d barriers, %g FLOPs; one row %d, %d, %g", rows, b.Dispatches, b.Barriers, b.FLOPs, one.Dispatches, one.Barriers, one.FLOPs)
		}
		prev = b
	}
	for _, rows := range []int{0, -1, MaxRows + 1} {
		if _, err := BatchModel(c, rows, 128, 16); err == nil {
			t.Errorf("a batch of %d accepted", rows)
		}
	}
}

// TestBatchTokS: the aggregate rate is the rows over the chip's time for the step, and more rows
// give more tokens a second.
func TestBatchTokS(t *testing.T) {
	c := config.Production()
	chip, _ := plan.ChipNamed("M4 Max")
	one, _ := BatchModel(c, 1, 128, 16)
	four, err := BatchModel(c, 4, 128, 16)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := four.TokS(chip), 4/chip.Seconds(four.Bytes, four.FLOPs); got != want || got <= one.TokS(chip) || got >= 4*one.TokS(chip) {
		t.Errorf("4 rows: %g tok/s (%g by the time model), one row %g", got, want, one.TokS(chip))
	}
}

// TestUnionExperts: the expected number of distinct experts R rows touch, each choosing K of E
// distinct experts uniformly, against the closed forms for one and two rows and a sampled count.
func TestUnionExperts(t *testing.T) {
	const E, K = 256, 8
	if d := UnionExperts(E, K, 1); d != K {
		t.Errorf("1 row: %g", d)
	}
	if d, want := UnionExperts(E, K, 2), 2*K-K*K/float64(E); math.Abs(d-want) > 1e-9 {
		t.Errorf("2 rows: %g, want %g", d, want) // inclusion–exclusion: 15.75
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, rows := range []int{4, 8} {
		const trials = 20000
		total := 0
		for range trials {
			seen := map[int]bool{}
			for range rows {
				for _, e := range r.Perm(E)[:K] {
					seen[e] = true
				}
			}
			total += len(seen)
		}
		got, want := UnionExperts(E, K, rows), float64(total)/trials
		if math.Abs(got-want) > 0.01*want {
			t.Errorf("%d rows: %g experts, sampled %g", rows, got, want)
		}
	}
	if d := UnionExperts(E, K, 4096); math.Abs(d-E) > 1e-6 {
		t.Errorf("4,096 rows: %g of %d experts", d, E)
	}
}
