package kernels

import "fmt"

// AttnTokens is attn_prefill's function constant index of ATTN_T, the chunk's tokens; the other
// constants are the shape's (AttnShape.Constants).
const AttnTokens = 10

// AttnPrefillBlock is the tokens an attn_prefill threadgroup computes (AP_BQ).
const AttnPrefillBlock = 8

// AttnPrefillRows is the rows attn_prefill's query buffer must hold for tokens tokens: whole
// blocks (the rows past tokens are computed and not stored).
func AttnPrefillRows(tokens int) int {
	return (tokens + AttnPrefillBlock - 1) / AttnPrefillBlock * AttnPrefillBlock
}

// AttnPrefill is the Go reference of attn_prefill: AttnDecode for each of the tokens tokens at
// positions pos0, pos0+1, ... (q: a row of Heads·HeadDim rotated queries per token, qg a row of
// the q projection per token); it returns a row of Heads·HeadDim outputs per token.
func AttnPrefill(s AttnShape, pos0, tokens int, q, qg []float32, kCache, vCache []byte, table []uint32) []float32 {
	var out []float32
	qd := s.Heads * s.HeadDim
	for t := range tokens {
		out = append(out, AttnDecode(s, pos0+t, q[t*qd:(t+1)*qd], qg[t*2*qd:(t+1)*2*qd], kCache, vCache, table)...)
	}
	return out
}

// AttnPrefillBuffers are attn_prefill's buffers, by role.
type AttnPrefillBuffers[B any] struct {
	Q      B // 0: [AttnPrefillRows(tokens)][Heads·HeadDim] rotated queries
	KCache B // 1: the K pool, the chunk's rows written
	VCache B // 2: the V pool
	Step   B // 3: {pos0, token}: the chunk's first position
	Table  B // 4: [TableLen] the block table
	QG     B // 5: [tokens][Heads·2·HeadDim] the q projection (its gates)
	Out    B // 6: [tokens][Heads·HeadDim]
}

// AttnPrefillCall is attn_prefill for a chunk of tokens tokens: a threadgroup of a simdgroup per
// query head of a kv head, per kv head and block of AttnPrefillBlock tokens.
func AttnPrefillCall[B any](s AttnShape, tokens int, b AttnPrefillBuffers[B]) Call[B] {
	c := s.Constants(0)
	c[AttnTokens] = tokens
	return Call[B]{
		Kernel: "attn_prefill", Constants: c,
		Buffers:      map[int]B{0: b.Q, 1: b.KCache, 2: b.VCache, 3: b.Step, 4: b.Table, 5: b.QG, 6: b.Out},
		Threadgroups: [3]int{s.KVHeads, groupsFor(tokens, AttnPrefillBlock), 1}, Group: grid(s.AttnPartialThreads()),
	}
}

// attn_prefill_tensor's geometry (attn_prefill_tensor.metal): a threadgroup of
// AttnPrefillTensorThreads (4 simdgroups) computes AttnPrefillTensorRows (token, query head) rows
// of one kv head — AttnPrefillTensorBlock(G) tokens of its G heads — over tiles of
// AttnPrefillTensorKeys keys, every tile AttnPrefillTensorDim columns wide (head dims up to it,
// zero-padded).
const (
	AttnPrefillTensorRows    = 32
	AttnPrefillTensorKeys    = 16
	AttnPrefillTensorDim     = 256
	AttnPrefillTensorThreads = 128
)

// AttnPrefillTensorBlock is the tokens an attn_prefill_tensor threadgroup computes for g query
// heads per kv head: AttnPrefillTensorRows / g. It panics unless g divides AttnPrefillTensorRows
// (the rows must be whole tokens' heads).
func AttnPrefillTensorBlock(g int) int {
	if g < 1 || AttnPrefillTensorRows%g != 0 {
		panic(fmt.Sprintf("kernels: attn_prefill_tensor needs query heads per kv head dividing %d, not %d", AttnPrefillTensorRows, g))
	}
	return AttnPrefillTensorRows / g
}

// attnPrefillTensorFits is nil when attn_prefill_tensor runs attn_prefill's constants c, else
// why not: its 32 rows must be whole tokens' query heads (G = heads per kv head dividing
// AttnPrefillTensorRows), and its tiles hold head dims up to AttnPrefillTensorDim, multiples of 8.
func attnPrefillTensorFits(c map[int]any) error {
	nq, nkv, hd := c[AttnHeads].(int), c[AttnKVHeads].(int), c[AttnHeadDim].(int)
	switch {
	case nkv <= 0 || nq%nkv != 0:
		return fmt.Errorf("attn_prefill_tensor cannot run %d query heads over %d kv heads", nq, nkv)
	case hd > AttnPrefillTensorDim || hd%8 != 0:
		return fmt.Errorf("attn_prefill_tensor cannot run head dim %d (multiples of 8 up to %d)", hd, AttnPrefillTensorDim)
	case AttnPrefillTensorRows%(nq/nkv) != 0:
		return fmt.Errorf("attn_prefill_tensor needs query heads per kv head dividing %d, not %d", AttnPrefillTensorRows, nq/nkv)
	}
	return nil
}

// attnPrefillTensorGrid is attn_prefill_tensor's grid for attn_prefill's constants c: (kv heads,
// blocks of AttnPrefillTensorBlock tokens), and its threadgroup. It panics for a shape the
// kernel cannot run (attnPrefillTensorFits; TensorFits says so without panicking).
func attnPrefillTensorGrid(c map[int]any) (groups, threads [3]int) {
	if err := attnPrefillTensorFits(c); err != nil {
		panic("kernels: " + err.Error())
	}
	block := AttnPrefillTensorBlock(c[AttnHeads].(int) / c[AttnKVHeads].(int))
	return [3]int{c[AttnKVHeads].(int), groupsFor(c[AttnTokens].(int), block), 1}, grid(AttnPrefillTensorThreads)
}

// AttnPrefillTensorCall is attn_prefill's tensor form (TensorForm of AttnPrefillCall).
func AttnPrefillTensorCall[B any](s AttnShape, tokens int, b AttnPrefillBuffers[B]) Call[B] {
	c, _ := TensorForm(AttnPrefillCall(s, tokens, b))
	return c
}
