package kernels

// The chunk (prefill) kernels store the activations that pass between them as bfloat when the
// plan says so: at thousands of tokens those activations, not the weights, are most of a
// chunk's memory traffic. Two bool function constants, the same indices in every such kernel,
// choose the element type of its activation buffers — each kernel's source says which buffers
// count as its inputs and outputs (the residual stream, routing weights and logits never do).
// Unset, they are float32 (the cases' float forms); set, the kernel widens on load and rounds
// to nearest even on store, computing in float32 either way.
const (
	ActInBF16  = 20 // bool: the kernel's activation inputs are bfloat
	ActOutBF16 = 21 // bool: the kernel's activation outputs are bfloat
)

// BF16Acts is c with its activation inputs (in) and outputs (out) stored as bfloat, and the
// others float32 (the constant unset).
func BF16Acts[B any](c Call[B], in, out bool) Call[B] {
	k := make(map[int]any, len(c.Constants)+2)
	for i, v := range c.Constants {
		k[i] = v
	}
	for i, set := range map[int]bool{ActInBF16: in, ActOutBF16: out} {
		if set {
			k[i] = true
		} else {
			delete(k, i)
		}
	}
	c.Constants = k
	return c
}

// ActTypes is which of a call's activations BF16Acts made bfloat.
func ActTypes[B any](c Call[B]) (in, out bool) {
	in, _ = c.Constants[ActInBF16].(bool)
	out, _ = c.Constants[ActOutBF16].(bool)
	return in, out
}
