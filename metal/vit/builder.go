package vit

import (
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// builder appends the tower's buffers and dispatches, setting barriers as dependencies need.
type builder struct {
	t       *Tower
	read    map[int]bool // buffers read since the last barrier
	written map[int]bool // buffers written since the last barrier
}

func (b *builder) buffer(name string, size int64, kind plan.Kind) int {
	p := b.t.Plan
	p.Buffers = append(p.Buffers, plan.Buffer{Name: name, Size: size, Kind: kind})
	return len(p.Buffers) - 1
}

// floats allocates a float32 buffer of n values.
func (b *builder) floats(name string, n int, kind plan.Kind) int {
	return b.buffer(name, 4*int64(n), kind)
}

// weight declares the Weights buffer of the checkpoint tensor name (without the tower's prefix).
func (b *builder) weight(t *Tower, name string, size int64) int {
	i := b.buffer(Prefix+name, size, plan.Weights)
	t.Weights[Prefix+name] = i
	return i
}

// linear declares module's weight [out][in] and bias [out] of elem bytes each (2: bfloat, as
// the checkpoint stores them; 4: float32, the folded patch embedding).
func (b *builder) linear(t *Tower, module string, out, in, elem int) linear {
	return linear{
		w:   b.weight(t, module+".weight", int64(elem*out*in)),
		b:   b.weight(t, module+".bias", int64(elem*out)),
		out: out, in: in,
	}
}

// norm declares a LayerNorm's bfloat gain and shift of d.
func (b *builder) norm(t *Tower, module string, d int) norm {
	return norm{w: b.weight(t, module+".weight", 2*int64(d)), b: b.weight(t, module+".bias", 2*int64(d))}
}

// gemm adds y = x·Wᵀ + bias through epi over rows rows (EpilogueAdd also reads y), in the form
// the tower's route runs (form).
func (b *builder) gemm(l linear, x, y, rows int, epi kernels.ViTEpilogue, f32 bool) {
	c := kernels.ViTGEMMCall(rows, l.out, l.in, epi, f32, kernels.ViTGEMMBuffers[int]{X: x, W: l.w, Bias: l.b, Y: y})
	c, tensor, fallback := b.form(c)
	reads := []int{x, l.w, l.b}
	if epi == kernels.EpilogueAdd {
		reads = append(reads, y)
	}
	ideal := 2 * float64(rows) * float64(l.out) * float64(l.in)
	b.addRanges(c, b.ranges(reads, x, rows*l.in), b.ranges([]int{y}, y, rows*l.out), GEMMFLOPs(rows, l.out, l.in, tensor), ideal)
	d := &b.t.Plan.Dispatches[len(b.t.Plan.Dispatches)-1]
	d.Tensor, d.Fallback = tensor, fallback
}

// form is the call the tower's route runs for the GEMM c, whether its FLOPs run on tensor ops
// (plan.Dispatch.Tensor), and why, on the tensor route, c keeps vit_gemm (plan.Dispatch.Fallback:
// a shape its tensor form cannot run, kernels.TensorFits).
func (b *builder) form(c kernels.Call[int]) (out kernels.Call[int], tensor bool, fallback string) {
	if b.t.Route != plan.Tensor {
		return c, false, ""
	}
	if err := kernels.TensorFits(c); err != nil {
		return c, false, err.Error()
	}
	out, tensor = kernels.TensorForm(c)
	return out, tensor, ""
}

// layerNorm adds vit_layernorm over rows rows of d from x into out.
func (b *builder) layerNorm(n norm, x, out, rows, d int, eps float32) {
	c := kernels.LayerNormCall(d, rows, eps, kernels.LayerNormThreads, kernels.LayerNormBuffers[int]{X: x, W: n.w, B: n.b, Out: out})
	b.add(c, []int{x, n.w, n.b}, []int{out}, 0, 0)
}

// ranges are whole buffers, but for buf, of which only the first n float32 values are touched
// (the merger's rows are a quarter of the patches').
func (b *builder) ranges(bufs []int, buf, n int) []plan.Range {
	var out []plan.Range
	for _, i := range bufs {
		r := plan.Range{Buffer: i, Len: b.t.Plan.Buffers[i].Size}
		if i == buf {
			r.Len = min(r.Len, 4*int64(n))
		}
		out = append(out, r)
	}
	return out
}

// add appends c reading and writing whole buffers.
func (b *builder) add(c kernels.Call[int], reads, writes []int, flops, ideal float64) {
	b.addRanges(c, b.ranges(reads, -1, 0), b.ranges(writes, -1, 0), flops, ideal)
}

// addRanges appends c with a barrier when it reads a buffer written, or writes a buffer read
// or written, since the last barrier.
func (b *builder) addRanges(c kernels.Call[int], reads, writes []plan.Range, flops, ideal float64) {
	d := decode.Dispatch(c, reads, writes)
	d.FLOPs, d.IdealFLOPs = flops, ideal
	for _, r := range reads {
		d.Barrier = d.Barrier || b.written[r.Buffer]
	}
	for _, r := range writes {
		d.Barrier = d.Barrier || b.written[r.Buffer] || b.read[r.Buffer]
	}
	if d.Barrier {
		clear(b.read)
		clear(b.written)
	}
	for _, r := range reads {
		b.read[r.Buffer] = true
	}
	for _, r := range writes {
		b.written[r.Buffer] = true
	}
	b.t.Plan.Dispatches = append(b.t.Plan.Dispatches, d)
}
