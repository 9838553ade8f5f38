package decode

import (
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// TestVerifyPlan: a multi-row step that takes verify groups runs the plain step's dispatches in
// every decode mode, in order with the same barriers, but for every DeltaNet layer's conv1d_step
// and gdn_step, which take their group form (CONV_GROUPS, GDN_GROUPS) over the groups buffer and
// write the layer's rings; ModeCommit runs only the 30 layers' conv1d_commit and gdn_commit;
// Init makes every row a group of one (the plain step); the rings take R rows of the channels and
// of kernels.GDNShape.RingLen per layer.
func TestVerifyPlan(t *testing.T) {
	c := config.Production()
	const R = 4
	plain, err := Build(c, Options{MaxCtx: 4096, Rows: R})
	if err != nil {
		t.Fatal(err)
	}
	v, err := Build(c, Options{MaxCtx: 4096, Rows: R, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{ModeGreedy, ModeSample, ModePrefill} {
		if a, b := plain.Plan.Stats(mode), v.Plan.Stats(mode); a.Dispatches != b.Dispatches || a.Barriers != b.Barriers {
			t.Fatalf("%s: %d dispatches, %d barriers with verify groups; %d, %d without", mode, b.Dispatches, b.Barriers, a.Dispatches, a.Barriers)
		}
	}
	checkGroupForms(t, v)
	gdnLayers := 0
	for _, k := range c.Layers {
		if k == config.LinearAttention {
			gdnLayers++
		}
	}
	if st := v.Plan.Stats(ModeCommit); st.Dispatches != 2*gdnLayers {
		t.Fatalf("commit mode: %d dispatches, want %d", st.Dispatches, 2*gdnLayers)
	}
	gs := kernels.GDNShape{HK: c.LinearKeyHeads, HV: c.LinearValueHeads, DK: c.LinearKeyDim, DV: c.LinearValueDim}
	var rings int64
	for _, b := range v.Plan.Buffers {
		if b.Kind == plan.Activations && (strings.HasSuffix(b.Name, ".conv_ring") || strings.HasSuffix(b.Name, ".gdn_ring")) {
			rings += b.Size
		}
	}
	if want := int64(gdnLayers * R * 4 * (gs.Channels() + gs.RingLen())); rings != want {
		t.Fatalf("rings of %d bytes, want %d", rings, want)
	}
	t.Logf("%d rows: rings %.1f MB", R, float64(rings)/1e6)
	m, err := MemoryOf(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m.Ring*R != rings {
		t.Fatalf("the memory plan counts %d bytes of rings a row, the plan's %d rows hold %d", m.Ring, R, rings)
	}
	ws := int64(64 << 30)
	room := ws - reserve - m.Weights - m.Scratch - R*m.State - (R-1)*m.RowScratch - R*m.Ring
	if got, want := m.PagesBeside(ws, m.PageSize, R), int(room/(m.KVPerPosition*int64(m.PageSize))); got != want {
		t.Fatalf("%d KV pages beside %d rows and their rings, want %d", got, R, want)
	}
	// A group's later rows are lent the table and offsets and use the step entry and cleared
	// params; nothing that runs in the decode modes touches their other per-row buffers but
	// through the params' flags (the sampler's state, bias and penalties) or the group forms
	// (the DeltaNet states and windows, only at a group's first row).
	g := v.GroupRows()
	if !slices.Equal(g.Lent, []int{v.Table, v.RopeOff}) || !slices.Equal(g.Scratch, []int{v.StepBuf, v.Sampler.Params}) {
		t.Fatalf("group rows %+v", g)
	}
	for _, i := range v.PerRow() {
		name := v.Plan.Buffers[i].Name
		flagged := slices.Contains([]int{v.Sampler.State, v.Sampler.Bias, v.Sampler.Pen, v.Sampler.Status}, i)
		recurrent := v.Plan.Buffers[i].Kind == plan.State && i != v.RopeOff
		if used := slices.Contains(g.Lent, i) || slices.Contains(g.Scratch, i); used == (flagged || recurrent) {
			t.Fatalf("per-row buffer %s: used by a group's later rows %v", name, used)
		}
	}
	bufs := map[int][]byte{}
	for i, b := range v.Plan.Buffers {
		if b.Kind != plan.KVCache {
			bufs[i] = make([]byte, b.Size)
		}
	}
	v.Init(func(i int) []byte { return bufs[i] })
	if g := U32sOf(bufs[v.Groups]); !slices.Equal(g, []uint32{1, 1, 1, 1}) {
		t.Fatalf("groups after Init: %v", g)
	}
	if err := v.Plan.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(c, Options{MaxCtx: 64, Verify: true}); err == nil {
		t.Fatal("a one-row step took verify groups")
	}
}

// checkGroupForms requires every conv1d_step and gdn_step of the verify plan to be its group form
// over the groups buffer, and no other dispatch to be.
func checkGroupForms(t *testing.T, v *Step) {
	t.Helper()
	n := 0
	for i, d := range v.Plan.Dispatches {
		var on bool
		switch d.Kernel {
		case "conv1d_step":
			on, _ = d.Constants[kernels.ConvGroups].(bool)
			on = on && d.Buffers[4].Buffer == v.Groups
		case "gdn_step":
			on, _ = d.Constants[kernels.GDNGroups].(bool)
			on = on && d.Buffers[9].Buffer == v.Groups
		default:
			continue
		}
		if !on {
			t.Fatalf("dispatch %d (%s) is not its group form over the groups buffer", i, d.Kernel)
		}
		n++
	}
	if n != 60 {
		t.Fatalf("%d group-form dispatches, want 60", n)
	}
}
