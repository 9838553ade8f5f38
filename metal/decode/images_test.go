package decode

import (
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// textOnly is the production config without its vision tower (lily serve --vision off).
func textOnly() *config.Config {
	c := config.Production()
	c.Vision = nil
	return c
}

// TestImagesPlan: a plan that takes images (the model has its tower) is the text-only plan's
// dispatches in every mode, in the same order with the same barriers, but for attn_qk_rope_kv,
// which gains ATTN_MROPE and reads the per-row offsets (decode) or the chunk's (chunk modes) and
// the axis table; the per-row offsets are sequence state (Session, PerRow), so snapshots and row
// moves carry the delta.
func TestImagesPlan(t *testing.T) {
	for _, rows := range []int{1, 3} {
		o := Options{MaxCtx: 4096, Rows: rows}
		if rows == 1 {
			o.Chunks = []int{512, 64}
		}
		text, err := Build(textOnly(), o)
		if err != nil {
			t.Fatal(err)
		}
		img, err := Build(config.Production(), o)
		if err != nil {
			t.Fatal(err)
		}
		checkImagesPlan(t, text, img)
		if !slices.Contains(img.Session, img.RopeOff) || !slices.Contains(img.PerRow(), img.RopeOff) {
			t.Errorf("%d rows: rope.off (%d) is not sequence state: Session %v", rows, img.RopeOff, img.Session)
		}
		if got := img.Plan.Buffers[img.RopeOff].Size; got != 12*int64(rows) {
			t.Errorf("%d rows: rope.off is %d bytes", rows, got)
		}
	}
}

// checkImagesPlan compares the text and image plans dispatch by dispatch.
func checkImagesPlan(t *testing.T, text, img *Step) {
	t.Helper()
	if len(text.Plan.Dispatches) != len(img.Plan.Dispatches) {
		t.Fatalf("%d dispatches with images, %d without", len(img.Plan.Dispatches), len(text.Plan.Dispatches))
	}
	mrope := 0
	for i, d := range img.Plan.Dispatches {
		td := text.Plan.Dispatches[i]
		if d.Kernel != td.Kernel || d.Barrier != td.Barrier || !slices.Equal(d.Modes, td.Modes) {
			t.Fatalf("dispatch %d: %s (barrier %v) with images, %s (barrier %v) without", i, d.Kernel, d.Barrier, td.Kernel, td.Barrier)
		}
		on, _ := d.Constants[kernels.AttnMRoPE].(bool)
		if d.Kernel != "attn_qk_rope_kv" {
			if on {
				t.Fatalf("dispatch %d (%s) has ATTN_MROPE", i, d.Kernel)
			}
			continue
		}
		off := img.RopeOff
		if slices.ContainsFunc(d.Modes, func(m string) bool { return !slices.Contains(decodeModes, m) }) {
			off = img.ChunkRopeOff
		}
		if !on || d.Buffers[11].Buffer != off || img.Plan.Buffers[d.Buffers[12].Buffer].Name != "rope.axis" {
			t.Fatalf("dispatch %d (modes %v): ATTN_MROPE %v, buffer 11 %d (want %d), buffer 12 %q", i, d.Modes, on,
				d.Buffers[11].Buffer, off, img.Plan.Buffers[d.Buffers[12].Buffer].Name)
		}
		mrope++
	}
	if want := 10 * (1 + len(img.Chunks)); mrope != want {
		t.Fatalf("%d attn_qk_rope_kv dispatches with ATTN_MROPE, want %d (10 layers, decode and %d chunk sizes)", mrope, want, len(img.Chunks))
	}
	if err := img.Plan.Validate(); err != nil {
		t.Fatal(err)
	}
}

var decodeModes = []string{ModeGreedy, ModeSample, ModeGreedyLogprobs, ModeSampleLogprobs, ModePrefill}

// TestTextOnlyPlan: without the tower the plan takes no images: no offsets, no ATTN_MROPE.
func TestTextOnlyPlan(t *testing.T) {
	s, err := Build(textOnly(), Options{MaxCtx: 64, Chunks: []int{16}})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range s.Plan.Buffers {
		if b.Name == "rope.off" || b.Name == "chunk.rope_off" || b.Name == "rope.axis" {
			t.Errorf("a text-only plan has %s", b.Name)
		}
	}
	for i, d := range s.Plan.Dispatches {
		if _, ok := d.Constants[kernels.AttnMRoPE]; ok || s.Images {
			t.Fatalf("dispatch %d (%s) of a text-only plan sets ATTN_MROPE (Images %v)", i, d.Kernel, s.Images)
		}
	}
}

// TestImagesAxisTable: the axis table the plan uploads is the config's interleaved sections.
func TestImagesAxisTable(t *testing.T) {
	c := config.Production()
	s, err := Build(c, Options{MaxCtx: 64})
	if err != nil {
		t.Fatal(err)
	}
	bufs := map[int][]byte{}
	for i, b := range s.Plan.Buffers {
		if b.Kind != plan.KVCache {
			bufs[i] = make([]byte, b.Size)
		}
	}
	s.Init(func(i int) []byte { return bufs[i] })
	for i, b := range s.Plan.Buffers {
		if b.Name != "rope.axis" {
			continue
		}
		got := U32sOf(bufs[i])
		for j, a := range got {
			if int(a) != c.MRoPEAxis(j) {
				t.Fatalf("axis %d: %d, the config says %d", j, a, c.MRoPEAxis(j))
			}
		}
		if len(got) != c.RotaryDim/2 {
			t.Fatalf("%d axes for %d rotary dims", len(got), c.RotaryDim)
		}
		return
	}
	t.Fatal("no rope.axis buffer")
}
