package kernels

// gdn_conv_step (gdn_conv.metal) is conv1d_step fused into gdn_step. Its function constants 0-4
// are gdn_step's (GDNKeyHeads, GDNValueHeads, GDNKeyDim, GDNValueDim, GDNEps); the one below is
// optional and only for tests.
const (
	// GDNConvFirstHead (uint GDNC_HEAD0_FC, optional) offsets the value head index by a
	// constant, so a test can dispatch a subset of heads. Production leaves it unset (0).
	GDNConvFirstHead = 5
)

// gdn_conv_step buffer indices. 0-8 mean what they mean for gdn_step, except that buffer 0 is
// the raw in_proj_qkv output (before the conv), not the conv output.
const (
	GDNConvX      = 0  // [C] raw qkv projection, q ‖ k ‖ v
	GDNConvZ      = 1  // [HV*DV]
	GDNConvA      = 2  // [HV]
	GDNConvB      = 3  // [HV]
	GDNConvALog   = 4  // [HV]
	GDNConvDtBias = 5  // [HV]
	GDNConvNormW  = 6  // [DV]
	GDNConvState  = 7  // [HV][DV][DK], in place
	GDNConvY      = 8  // [HV*DV]
	GDNConvTaps   = 9  // [C][4] float32
	GDNConvWinIn  = 10 // [3][C] float32, read only: the window after the previous token
	GDNConvWinOut = 11 // [3][C] float32, written only: the window after this token
)

// Window contract: the plan keeps two [3][C] windows per GDN layer and passes them as
// GDNConvWinIn/GDNConvWinOut swapped every token (token t reads A and writes B, token t+1 reads
// B and writes A). They must never be the same buffer: two value heads read the same q/k window
// entries and threadgroups run in any order, so an in-place shift would race. Every entry of
// the out window is written exactly once per dispatch.

// GDNConvTGMem returns gdn_conv_step's threadgroup memory lengths in bytes: [[threadgroup(0)]]
// (DV floats, the head's outputs) and [[threadgroup(1)]] (2*DK + DV floats, the head's conv
// output), each rounded up to 16.
func (s GDNShape) GDNConvTGMem() map[int]int {
	return map[int]int{0: s.ThreadgroupMem(), 1: (4*(2*s.DK+s.DV) + 15) &^ 15}
}

// GDNConvStep is the Go reference of gdn_conv_step: Conv1DStep then GDNStep, as the two
// separate dispatches compute them. window ([3][C]) is shifted in place (the kernel writes the
// same values to its out window); state is updated in place and y written.
func GDNConvStep(s GDNShape, p GDNParams, state, y, window, taps, x, z, a, b []float32) {
	u := make([]float32, s.Channels())
	Conv1DStep(u, window, taps, x[:s.Channels()])
	GDNStep(s, p, state, y, u, z, a, b)
}

// GDNConvStepBuffers are gdn_conv_step's buffers, by role (the GDNConv* indices).
type GDNConvStepBuffers[B any] struct {
	X      B // GDNConvX: [C] the raw qkv projection
	Z      B // GDNConvZ: [HV*DV]
	A      B // GDNConvA: [HV]
	Beta   B // GDNConvB: [HV] beta's projection (before the sigmoid)
	ALog   B // GDNConvALog: [HV]
	DtBias B // GDNConvDtBias: [HV]
	NormW  B // GDNConvNormW: [DV]
	State  B // GDNConvState: [HV][DV][DK], in place
	Y      B // GDNConvY: [HV*DV]
	Taps   B // GDNConvTaps: [C][4] float32
	WinIn  B // GDNConvWinIn: [3][C], read only
	WinOut B // GDNConvWinOut: [3][C], written only (never WinIn: see the window contract)
}

func (b GDNConvStepBuffers[B]) bindings() map[int]B {
	return map[int]B{
		GDNConvX: b.X, GDNConvZ: b.Z, GDNConvA: b.A, GDNConvB: b.Beta, GDNConvALog: b.ALog, GDNConvDtBias: b.DtBias,
		GDNConvNormW: b.NormW, GDNConvState: b.State, GDNConvY: b.Y, GDNConvTaps: b.Taps, GDNConvWinIn: b.WinIn, GDNConvWinOut: b.WinOut,
	}
}

// GDNConvStepCall is gdn_conv_step for one token over every value head (a threadgroup each),
// simdgroups simdgroups per threadgroup.
func GDNConvStepCall[B any](s GDNShape, eps float32, simdgroups int, b GDNConvStepBuffers[B]) Call[B] {
	return Call[B]{
		Kernel: "gdn_conv_step", Constants: s.Constants(eps), Buffers: b.bindings(),
		Threadgroups: grid(s.HV), Group: grid(32 * simdgroups), ThreadgroupMem: s.GDNConvTGMem(),
	}
}

// GDNConvStepHeadCall is gdn_conv_step for value head head alone (one threadgroup, the head
// offset by GDNConvFirstHead), so a test can dispatch the heads one by one in any order.
func GDNConvStepHeadCall[B any](s GDNShape, eps float32, simdgroups, head int, b GDNConvStepBuffers[B]) Call[B] {
	c := GDNConvStepCall(s, eps, simdgroups, b)
	c.Constants[GDNConvFirstHead] = head
	c.Threadgroups = grid(1)
	return c
}
