package cases

import (
	"fmt"
	"slices"

	"github.com/lilyformac/lily/metal/kernels"
)

// gdnConvTol: gdn_conv_step's y against GDNConvStep relative to max|y|: gdn_step's 1e-5 on the
// emulator, except for a lone DV-8 head, whose 8-element gated norm amplifies the emulator's
// libm-vs-Go rounding: 1e-4 (the kernel is bit-identical to the unfused kernels there too); the
// state is held to 1e-5 on the emulator in any case. Metal: gdn_step's 1e-4.
func gdnConvTol(s kernels.GDNShape) Tol {
	if s.DV < 16 {
		return Tol{Emu: 1e-4, Metal: 1e-4}
	}
	return Tol{Emu: 1e-5, Metal: 1e-4}
}

// headOrder is how a gdn_conv_step case dispatches a token's value heads.
type headOrder int

const (
	oneDispatch     headOrder = iota // all HV threadgroups in one dispatch
	perHeadReverse                   // one dispatch per head, last head first
	perHeadShuffled                  // one dispatch per head, in a random order per token
	perHeadForward                   // one dispatch per head, head 0 first
)

func (h headOrder) String() string {
	return [...]string{"one", "heads-reverse", "heads-shuffled", "heads-forward"}[h]
}

type gdnConvShape struct {
	s          kernels.GDNShape
	nsg, steps int
	heads      headOrder
	aliased    bool // one window bound as both in and out: the in-place shift the contract forbids
}

func gdnConvCases() []Case {
	var out []Case
	for _, c := range gdnEdges {
		for _, h := range []headOrder{oneDispatch, perHeadReverse, perHeadShuffled} {
			out = append(out, gdnConvCase(gdnConvShape{s: c.s, nsg: c.nsg, steps: c.steps, heads: h}))
		}
	}
	// The model's shape (8192 channels) in the 1024-thread production geometry, one dispatch and
	// heads in reverse; a short run of an edge shape.
	return append(out,
		gdnConvCase(gdnConvShape{s: gdnModel, nsg: kernels.GDNSimdgroups, steps: 3, heads: oneDispatch}),
		gdnConvCase(gdnConvShape{s: gdnModel, nsg: kernels.GDNSimdgroups, steps: 2, heads: perHeadReverse}),
		gdnConvCase(gdnConvShape{s: kernels.GDNShape{HK: 2, HV: 4, DK: 64, DV: 40}, nsg: 3, steps: 2, heads: oneDispatch}),
	)
}

// gdnConvCase runs steps tokens through gdn_conv_step and GDNConvStep from the same random state
// and window. The kernel's windows alternate between two buffers (in, out swapped every token,
// each token's dispatches a mode of the plan); after each token the out window must equal the
// reference window exactly and the in window must be untouched. The same tokens also go through
// the two kernels the fusion replaces (conv1d_step, then gdn_step), whose y, state and window the
// fused kernel must reproduce bit for bit on the emulator: the same float32 operations in the
// same order.
func gdnConvCase(g gdnConvShape) Case {
	s := g.s
	kernel := "gdn_conv_step"
	if g.heads != oneDispatch {
		kernel += "+heads"
	}
	name := fmt.Sprintf("gdn_conv_step/%s_nsg%d_%dsteps_%v", gdnTag(s), g.nsg, g.steps, g.heads)
	ks := []string{kernel, "conv1d_step", "gdn_step"}
	if g.aliased {
		name += "_aliased"
		ks = ks[:1]
	}
	return Case{
		Name: name, Kernels: ks, Tol: gdnConvTol(s),
		Shape: fmt.Sprintf("%d/%d heads × %d/%d (%d channels), %d simdgroups, %d tokens in turn, heads %v", s.HK, s.HV, s.DK, s.DV, s.Channels(), g.nsg, g.steps, g.heads),
		Run: func(c *Ctx) error {
			if err := s.Validate(); err != nil {
				return err
			}
			r, C := c.R, s.Channels()
			p := randGDNParams(r, s)
			state := RandFloats(r, s.StateLen(), 0.1)
			taps, window := RandFloats(r, C*kernels.ConvKernel, 0.5), RandFloats(r, (kernels.ConvKernel-1)*C, 1)
			x, z, a, b := c.In("x", make([]float32, C)), c.In("z", make([]float32, s.HV*s.DV)), c.In("a", make([]float32, s.HV)), c.In("b", make([]float32, s.HV))
			aLog, dt, normW, bTaps := c.In("A_log", p.ALog), c.In("dt_bias", p.DtBias), c.In("norm", p.NormW), c.In("taps", taps)
			bState, y := c.InOut("state", state), c.Out("y", 4*s.HV*s.DV)
			win := [2]int{c.InOut("win0", window), c.Out("win1", 4*len(window))}
			// The unfused path's buffers.
			uState, uWin, uU, uY := c.InOut("u_state", state), c.InOut("u_win", window), c.Out("u_u", 4*C), c.Out("u_y", 4*s.HV*s.DV)
			for step := range g.steps {
				mode := fmt.Sprint("token", step)
				in, out := win[step%2], win[(step+1)%2]
				if g.aliased {
					in, out = win[0], win[0]
				}
				bs := kernels.GDNConvStepBuffers[int]{X: x, Z: z, A: a, Beta: b, ALog: aLog, DtBias: dt, NormW: normW, State: bState, Y: y, Taps: bTaps, WinIn: in, WinOut: out}
				if g.heads == oneDispatch {
					c.AddModes(kernels.GDNConvStepCall(s, p.Eps, g.nsg, bs), true, mode)
				} else {
					heads := make([]int, s.HV)
					for i := range heads {
						heads[i] = i
					}
					switch g.heads {
					case perHeadReverse:
						slices.Reverse(heads)
					case perHeadShuffled:
						r.Shuffle(len(heads), func(i, j int) { heads[i], heads[j] = heads[j], heads[i] })
					}
					for _, h := range heads { // in this order: a barrier between heads
						c.AddModes(kernels.GDNConvStepHeadCall(s, p.Eps, g.nsg, h, bs), true, mode)
					}
				}
				if !g.aliased {
					c.AddModes(kernels.Conv1DStepCall(C, kernels.ConvThreads, kernels.Conv1DStepBuffers[int]{X: x, Taps: bTaps, Window: uWin, U: uU}), true, mode)
					c.AddModes(kernels.GDNStepCall(s, p.Eps, g.nsg, kernels.GDNStepBuffers[int]{
						QKV: uU, Z: z, A: a, Beta: b, ALog: aLog, DtBias: dt, NormW: normW, State: uState, Y: uY}), true, mode)
				}
			}
			yRef := make([]float32, s.HV*s.DV)
			var xs, zs, as, bv []float32
			var inBefore []byte
			return c.Steps(g.steps, func(step int) {
				c.SetMode(fmt.Sprint("token", step))
				xs, zs = RandFloats(r, C, 1), RandFloats(r, s.HV*s.DV, 1)
				as, bv = RandFloats(r, s.HV, 1), RandFloats(r, s.HV, 1)
				if step == 1 {
					as[0], as[len(as)-1] = 25, -30 // both softplus special cases
				}
				c.Set(x, xs)
				c.Set(z, zs)
				c.Set(a, as)
				c.Set(b, bv)
				c.Poison(y)
				if !g.aliased {
					c.Poison(win[(step+1)%2]) // unwritten window entries show as NaN
				}
				if !g.aliased {
					inBefore = slices.Clone(c.Bytes(win[step%2]))
				}
			}, func(step int) error {
				kernels.GDNConvStep(s, p, state, yRef, window, taps, xs, zs, as, bv)
				c.Rel(fmt.Sprintf("token %d: y", step), c.F32(y), yRef)
				if step == g.steps-1 {
					c.Rel("state", c.F32(bState), state)
					if e := kernels.RelErr(c.F32(bState), state); c.Kind == Emu && !g.aliased && !(e <= 1e-5) {
						return fmt.Errorf("state: relative error %.2g, want ≤ 1e-5", e)
					}
				}
				if g.aliased {
					return nil
				}
				in, out := win[step%2], win[(step+1)%2]
				if c.Kind == Emu {
					for _, p := range [][2]int{{y, uY}, {bState, uState}, {out, uWin}} {
						if err := Bits(fmt.Sprintf("token %d: %s against the unfused kernels'", step, c.Plan.Buffers[p[0]].Name), c.F32(p[0]), c.F32(p[1])); err != nil {
							return err
						}
					}
				}
				if !slices.Equal(c.Bytes(in), inBefore) {
					return fmt.Errorf("token %d: the in window was written", step)
				}
				return Bits(fmt.Sprintf("token %d: out window", step), c.F32(out), window)
			})
		},
	}
}
