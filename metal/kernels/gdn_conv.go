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
