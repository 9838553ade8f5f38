package decode

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// Rows 0 and 1 are the one-row plan, dispatch for dispatch and buffer for buffer.
func TestRowsOneIsTheOneRowPlan(t *testing.T) {
	c := config.Production()
	o := Options{MaxCtx: 4097, Chunks: []int{512, 64}, ChunkLogits: true}
	a, err := Build(c, o)
	if err != nil {
		t.Fatal(err)
	}
	o.Rows = 1
	b, err := Build(c, o)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Plan, b.Plan) || a.Rows != 1 || b.Rows != 1 {
		t.Fatal("Rows 1 changed the one-row plan")
	}
}

func TestRowsRefused(t *testing.T) {
	c := config.Production()
	for _, o := range []Options{
		{MaxCtx: 64, Rows: MaxRows + 1},
		{MaxCtx: 64, Rows: -1},
		{MaxCtx: 64, Rows: 2, Chunks: []int{16}},
	} {
		if _, err := Build(c, o); err == nil {
			t.Errorf("%+v: built", o)
		}
	}
}

// A multi-row plan is the one-row plan's decode step with every per-sequence and activation buffer
// R times as large and every dispatch in its rows form, in every decode mode.
func TestRowsPlan(t *testing.T) {
	c := config.Production()
	for _, R := range []int{2, 3, 8} {
		o := Options{MaxCtx: 1025, PageSize: 256, Pages: R*5 + 1}
		one, err := Build(c, o)
		if err != nil {
			t.Fatal(err)
		}
		o.Rows = R
		s, err := Build(c, o)
		if err != nil {
			t.Fatal(err)
		}
		checkRowsBuffers(t, one, s, R)
		checkRowsDispatches(t, one, s, R)
		if s.Rows != R {
			t.Fatalf("%d rows: Step.Rows %d", R, s.Rows)
		}
	}
}

// checkRowsBuffers checks that s has one's buffers, R times as large where they hold a sequence
// or an activation (all but the weights and the KV pools).
func checkRowsBuffers(t *testing.T, one, s *Step, R int) {
	t.Helper()
	var n int
	for _, b := range s.Plan.Buffers {
		i := slices.IndexFunc(one.Plan.Buffers, func(x plan.Buffer) bool { return x.Name == b.Name })
		if i < 0 {
			t.Fatalf("%d rows: buffer %s not in the one-row plan", R, b.Name)
		}
		want := one.Plan.Buffers[i].Size
		if b.Kind != plan.Weights && b.Kind != plan.KVCache {
			want *= int64(R)
		}
		if b.Size != want {
			t.Errorf("%d rows: %s is %d bytes, want %d", R, b.Name, b.Size, want)
		}
		n++
	}
	if n != len(one.Plan.Buffers) {
		t.Errorf("%d rows: %d buffers, the one-row plan %d", R, n, len(one.Plan.Buffers))
	}
}

// checkRowsDispatches checks that s runs one's dispatches (the same kernels in the same modes, so
// every mode's count is the one-row plan's), and that every batched kernel's dispatch carries
// the rows.
func checkRowsDispatches(t *testing.T, one, s *Step, R int) {
	t.Helper()
	if len(s.Plan.Dispatches) != len(one.Plan.Dispatches) {
		t.Fatalf("%d rows: %d dispatches, the one-row plan %d", R, len(s.Plan.Dispatches), len(one.Plan.Dispatches))
	}
	for i, d := range s.Plan.Dispatches {
		if o := one.Plan.Dispatches[i]; d.Kernel != o.Kernel || !slices.Equal(d.Modes, o.Modes) || d.Barrier != o.Barrier {
			t.Fatalf("%d rows: dispatch %d is %s in %v, the one-row plan's %s in %v", R, i, d.Kernel, d.Modes, o.Kernel, o.Modes)
		}
		var key int
		switch {
		case d.Kernel == "attn_qk_rope_kv":
			if d.Constants[kernels.AttnSeqRows] != true {
				t.Fatalf("%d rows: attn_qk_rope_kv without ATTN_SEQ_ROWS", R)
			}
			continue
		case d.Kernel == "sample_penalties":
			if d.Constants[kernels.SamplePenStride] != s.MaxCtx+1 || d.Threadgroups[1] != R {
				t.Fatalf("%d rows: sample_penalties with stride %v over %v", R, d.Constants[kernels.SamplePenStride], d.Threadgroups)
			}
			continue
		case strings.HasPrefix(d.Kernel, "qmv"):
			key = kernels.QMVBatch
		case strings.HasPrefix(d.Kernel, "moe_"):
			key = kernels.MoEBatch
		default:
			continue
		}
		if d.Constants[key] != R {
			t.Fatalf("%d rows: %s with constant %d = %v", R, d.Kernel, key, d.Constants[key])
		}
	}
}

// StateSpans describes one sequence: a multi-row step refuses.
func TestRowsStateSpansPanics(t *testing.T) {
	s, err := Build(config.Production(), Options{MaxCtx: 64, Rows: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("StateSpans of a 2-row step did not panic")
		}
	}()
	s.StateSpans(1, nil, func(int, int64, int64) {})
}

// PerRow names the same buffers in the one-row and a multi-row plan, each R times as large in the
// latter, and every buffer a multi-row plan holds R rows of but the activations.
func TestPerRow(t *testing.T) {
	c := config.Production()
	o := Options{MaxCtx: 1025, PageSize: 256, Pages: 9}
	one, err := Build(c, o)
	if err != nil {
		t.Fatal(err)
	}
	o.Rows = 4
	four, err := Build(c, o)
	if err != nil {
		t.Fatal(err)
	}
	a, b := one.PerRow(), four.PerRow()
	if len(a) != len(b) || len(a) < 4+2*len(c.Layers)*3/4 {
		t.Fatalf("PerRow: %d buffers in the one-row plan, %d in the 4-row plan", len(a), len(b))
	}
	for i := range a {
		x, y := one.Plan.Buffers[a[i]], four.Plan.Buffers[b[i]]
		if x.Name != y.Name || 4*x.Size != y.Size {
			t.Errorf("PerRow %d: %s of %d bytes, then %s of %d", i, x.Name, x.Size, y.Name, y.Size)
		}
	}
	per := map[string]bool{}
	for _, i := range b {
		per[four.Plan.Buffers[i].Name] = true
	}
	for i, x := range four.Plan.Buffers {
		if i == four.Logprobs {
			continue // [2][R] records: a step's output slots, not a sequence's state
		}
		j := slices.IndexFunc(one.Plan.Buffers, func(y plan.Buffer) bool { return y.Name == x.Name })
		rows := x.Size == 4*one.Plan.Buffers[j].Size && x.Kind != plan.Activations && x.Kind != plan.Weights && x.Kind != plan.KVCache
		if rows != per[x.Name] {
			t.Errorf("buffer %d (%s, kind %v): four rows of it %v, in PerRow %v", i, x.Name, x.Kind, rows, per[x.Name])
		}
	}
}
