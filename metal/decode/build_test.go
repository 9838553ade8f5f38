package decode

import (
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

func productionStep(t *testing.T, ctx int) *Step {
	t.Helper()
	s, err := Build(config.Production(), Options{MaxCtx: ctx + 1, TrafficCtx: ctx})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKV8Plan: with an 8-bit KV cache the plan is the same dispatches and moves the ideal's
// bytes for that format: at 32k cached tokens the KV read is 10,880 instead of 20,480 bytes per
// position, so a token at that context moves about 12% fewer bytes.
func TestKV8Plan(t *testing.T) {
	const ctx = 32768
	c := config.Production()
	s8, err := Build(c, Options{MaxCtx: ctx + 1, TrafficCtx: ctx, KVBits: 8})
	if err != nil {
		t.Fatal(err)
	}
	s16 := productionStep(t, ctx)
	st8, st16 := s8.Plan.Stats(ModeSample), s16.Plan.Stats(ModeSample)
	ideal8, ideal16 := plan.IdealBytes(c, ctx, 8), plan.IdealBytes(c, ctx, 16)
	r8 := float64(st8.Bytes) / float64(ideal8.Total())
	t.Logf("ctx %d: 8-bit KV %d bytes per token (ideal %d, ratio %.4f), bf16 KV %d (ideal %d)", ctx, st8.Bytes, ideal8.Total(), r8, st16.Bytes, ideal16.Total())
	if st8.Dispatches != st16.Dispatches || r8 < 1 || r8 > 1.05 || ideal8.KV*20480 != ideal16.KV*10880 {
		t.Fatalf("8-bit plan: %+v (ratio %.4f), bf16 %+v", st8, r8, st16)
	}
	if err := s8.Plan.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestProductionPlanShape: one embed; per GDN layer 7 dispatches (in_proj ×4 with the input
// norm, conv, gdn, out_proj +=, router and gate/up with the post norm, down +=), per attention
// layer 8 (q/k/v with the norm, rope+KV, partial, combine, o_proj +=, the three MoE); the LM head
// with the final norm; the penalties, then two argmax (greedy) or select + final (sampling). No
// add_rmsnorm is left.
func TestProductionPlanShape(t *testing.T) {
	s := productionStep(t, 4096)
	for _, mode := range []string{ModeGreedy, ModeSample} {
		if st := s.Plan.Stats(mode); st.Dispatches != 1+30*7+10*8+4 {
			t.Fatalf("%s: %d dispatches, want %d", mode, st.Dispatches, 1+30*7+10*8+4)
		}
	}
	for _, mode := range []string{ModeGreedyLogprobs, ModeSampleLogprobs} {
		if st := s.Plan.Stats(mode); st.Dispatches != 1+30*7+10*8+4+2 {
			t.Fatalf("%s: %d dispatches, want the selection's and logprob_partial, logprob_final", mode, st.Dispatches)
		}
	}
	st := s.Plan.Stats(ModeSample)
	if st.Dispatches > 300 {
		t.Fatalf("%d dispatches per token, the target is ≤ 300", st.Dispatches)
	}
	for i, d := range s.Plan.Dispatches {
		if d.Kernel == "add_rmsnorm" {
			t.Fatalf("dispatch %d: add_rmsnorm left in the plan", i)
		}
	}
	if err := s.Plan.Validate(); err != nil {
		t.Fatal(err)
	}
	ideal := plan.IdealBytes(s.Config, 4096, 16)
	ratio := float64(st.Bytes) / float64(ideal.Total())
	t.Logf("ctx 4096: %d dispatches, %d barriers, %d bytes, ideal %d (ratio %.4f)", st.Dispatches, st.Barriers, st.Bytes, ideal.Total(), ratio)
	if ratio < 1 || ratio > 1.05 {
		t.Fatalf("traffic %.4f × ideal", ratio)
	}
	// Per kind, for the report: what the unfused plan moves beyond the ideal.
	byKind := map[plan.Kind]int64{}
	for _, d := range s.Plan.Dispatches {
		for _, rs := range [][]plan.Range{d.Reads, d.Writes} {
			for _, r := range rs {
				byKind[s.Plan.Buffers[r.Buffer].Kind] += r.Len
			}
		}
	}
	t.Logf("bytes by kind (overlaps within a dispatch counted twice): weights %d (ideal %d), activations %d, state %d (ideal %d), kv %d (ideal %d), control %d",
		byKind[plan.Weights], ideal.Weights, byKind[plan.Activations], byKind[plan.State], ideal.State, byKind[plan.KVCache], ideal.KV, byKind[plan.Control])
}

// TestBarriersExactlyWhereNeeded checks the plan's barriers independently of the builder: a
// dispatch without a barrier conflicts (read-after-write, write-after-read or -write, by buffer)
// with nothing since the last barrier, and one with a barrier conflicts with something there.
func TestBarriersExactlyWhereNeeded(t *testing.T) {
	for _, s := range []*Step{productionStep(t, 4096), tinyStep(t)} {
		var groupR, groupW map[int]bool
		for i, d := range s.Plan.Dispatches {
			r, w := map[int]bool{}, map[int]bool{}
			for _, x := range d.Writes {
				w[x.Buffer] = true
			}
			for _, b := range d.Buffers {
				if !w[b.Buffer] {
					r[b.Buffer] = true
				}
			}
			conflict := false
			for b := range r {
				conflict = conflict || groupW[b]
			}
			for b := range w {
				conflict = conflict || groupW[b] || groupR[b]
			}
			if i > 0 && conflict != d.Barrier {
				t.Fatalf("dispatch %d (%s): barrier %v, conflict with its group %v", i, d.Kernel, d.Barrier, conflict)
			}
			if d.Barrier || i == 0 {
				groupR, groupW = map[int]bool{}, map[int]bool{}
			}
			for b := range r {
				groupR[b] = true
			}
			for b := range w {
				groupW[b] = true
			}
			// Every bound buffer is in the traffic model.
			seen := map[int]bool{}
			for _, x := range append(d.Reads, d.Writes...) {
				seen[x.Buffer] = true
			}
			for idx, b := range d.Buffers {
				if !seen[b.Buffer] {
					t.Fatalf("dispatch %d (%s): buffer(%d) %s has no range", i, d.Kernel, idx, s.Plan.Buffers[b.Buffer].Name)
				}
			}
		}
	}
}

// TestModesStayOrdered: in each selection mode the dispatches that run, with the barriers of
// the skipped ones carried to the next that runs (as exec encodes them), never overlap two that
// conflict.
func TestModesStayOrdered(t *testing.T) {
	chunked, err := Build(config.Production(), Options{MaxCtx: 4097, Chunks: []int{64, 16}, ChunkLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	big, small := chunked.Plan.Stats(ChunkModes(64).Run), chunked.Plan.Stats(ChunkModes(16).Run)
	if big.Dispatches == 0 || small.Dispatches != big.Dispatches || chunked.Plan.Stats(ModeGreedy) != productionStep(t, 4096).Plan.Stats(ModeGreedy) {
		t.Fatalf("chunk modes: %+v and %+v; the decode step must be unchanged by them", big, small)
	}
	for _, s := range []*Step{productionStep(t, 4096), tinyStep(t), chunked} {
		modes := []string{ModeGreedy, ModeSample, ModeGreedyLogprobs, ModeSampleLogprobs, ModePrefill}
		for _, n := range []int{64, 16} {
			m := ChunkModes(n)
			modes = append(modes, m.Run, m.Last, m.Logits)
		}
		for _, mode := range modes {
			groupR, groupW := map[int]bool{}, map[int]bool{}
			barrier := false
			for i, d := range s.Plan.Dispatches {
				if barrier = barrier || d.Barrier; !d.RunsIn(mode) {
					continue
				}
				if barrier {
					groupR, groupW, barrier = map[int]bool{}, map[int]bool{}, false
				}
				w := map[int]bool{}
				for _, x := range d.Writes {
					w[x.Buffer] = true
				}
				for _, b := range d.Buffers {
					if !w[b.Buffer] && groupW[b.Buffer] || w[b.Buffer] && (groupW[b.Buffer] || groupR[b.Buffer]) {
						t.Fatalf("%s: dispatch %d (%s) runs beside a conflicting one on %s", mode, i, d.Kernel, s.Plan.Buffers[b.Buffer].Name)
					}
				}
				for _, b := range d.Buffers {
					if w[b.Buffer] {
						groupW[b.Buffer] = true
					} else {
						groupR[b.Buffer] = true
					}
				}
			}
		}
	}
}

// TestMoETrafficMatchesKernelModel: the MoE dispatches' weight ranges equal kernels.MoEShape.Bytes.
func TestMoETrafficMatchesKernelModel(t *testing.T) {
	s := productionStep(t, 16)
	c := s.Config
	want := (kernels.MoEShape{H: c.HiddenSize, E: c.NumExperts, K: c.TopK, I: c.MoEIntermediate, SI: c.SharedIntermed}).Bytes()
	for _, d := range s.Plan.Dispatches {
		var w int64
		for _, r := range d.Reads {
			if s.Plan.Buffers[r.Buffer].Kind == plan.Weights {
				w += r.Len
			}
		}
		switch d.Kernel {
		case "moe_router":
			if w != int64(want.RouterWeights) {
				t.Fatalf("router weights %d, kernel model %d", w, want.RouterWeights)
			}
		case "moe_gate_up":
			if w != int64(want.GateUpWeights) {
				t.Fatalf("gate/up weights %d, kernel model %d", w, want.GateUpWeights)
			}
		case "moe_down_combine":
			if w != int64(want.DownWeights) {
				t.Fatalf("down weights %d, kernel model %d", w, want.DownWeights)
			}
		}
	}
}

func tinyStep(t *testing.T) *Step {
	t.Helper()
	c, err := config.Load("../../testdata/golden/tiny-a")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Build(c, Options{MaxCtx: 64})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBuildRejectsBadShapes(t *testing.T) {
	c := config.Production()
	if _, err := Build(c, Options{}); err == nil {
		t.Fatal("max context 0 accepted")
	}
	c.ConvKernel = 3
	if _, err := Build(c, Options{MaxCtx: 8}); err == nil {
		t.Fatal("conv kernel 3 accepted")
	}
}
