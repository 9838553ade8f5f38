package cases

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/kernels"
)

// embedTol: embed_q4 and embed_chunk copy a dequantized row, bit-exact on the emulator (checked
// with Bits there); Metal may fuse scale·q + bias into one FMA (half an ulp): 1e-6 of max|row|.
var embedTol = Tol{Emu: 0, Metal: 1e-6}

func embedCases() []Case {
	var out []Case
	// Edge shapes: one row, rows and widths that fill no whole threadgroup, the model's width;
	// tokens first, last, middle and past the end (the host's row: left as it was).
	for _, s := range []struct{ rows, cols int }{{1, 64}, {5, 128}, {7, 192}, {37, 192}, {9, 960}, {3, 2048}} {
		var tokens []int
		for _, t := range []int{0, s.rows - 1, s.rows / 2, s.rows + 5} {
			if !slices.Contains(tokens, t) {
				tokens = append(tokens, t)
			}
		}
		for _, t := range tokens {
			gen := func(r *rand.Rand) *quant.Matrix {
				return quant.Quantize(RandFloats(r, s.rows*s.cols, 0.02), s.rows, s.cols, 4)
			}
			out = append(out, embedCase(s.rows, s.cols, t, false, gen))
		}
	}
	// The selftest's shape: a vocabulary of 1,000 at the model's width.
	out = append(out, embedCase(1000, 2048, 777, false, func(r *rand.Rand) *quant.Matrix { return RandQ(r, 1000, 2048, 4) }))
	// Production: a tall embedding of the model's width whose row offsets need more than 16 bits.
	for _, t := range []int{0, 65537, 69999} {
		out = append(out, embedCase(70000, 2048, t, true, randEmbedding(70000, 2048)))
	}
	// The multi-row decode step: R rows' tokens (one past the end, repeats) from [R]{pos, token}.
	for _, r := range qmvBatches {
		out = append(out, embedBatchCase(37, 192, r))
	}
	out = append(out, embedBatchCase(1000, 2048, 8))
	out = append(out, Case{
		Name: "embed_chunk/37x192_5tok", Kernels: []string{"embed_chunk"}, Tol: embedTol,
		Shape: "vocab 37 × hidden 192, tokens 3 0 host 36 3 17 (a row of threadgroups each; the host's row left as it was)",
		Run: func(c *Ctx) error {
			const rows, cols = 37, 192
			e := quant.Quantize(RandFloats(c.R, rows*cols, 0.02), rows, cols, 4)
			tokens := []uint32{3, 0, kernels.EmbedHostRow, 36, 3, 17}
			prev := RandFloats(c.R, len(tokens)*cols, 1) // what the host wrote
			bs := kernels.EmbedChunkBuffers[int]{Embed: c.QM("embed", e), Tokens: c.In("tokens", tokens), Out: c.InOut("out", prev)}
			c.Add(kernels.EmbedChunkCall(cols, rows, len(tokens), bs), false)
			if err := c.Step(); err != nil {
				return err
			}
			var want []float32
			for i, t := range tokens {
				want = append(want, kernels.Embed(e, t, prev[i*cols:(i+1)*cols])...)
			}
			return c.embedCompare(c.F32(bs.Out), want)
		},
	})
	return out
}

// randEmbedding is a rows × cols 4-bit embedding of random codes, scales and biases (quantizing
// 140 M floats would take longer than the case).
func randEmbedding(rows, cols int) func(r *rand.Rand) *quant.Matrix {
	return func(r *rand.Rand) *quant.Matrix {
		return RandCodes(r, rows, cols, func(r *rand.Rand) (float32, float32) {
			return float32(r.NormFloat64()) * 0.01, float32(r.NormFloat64()) * 0.05
		})
	}
}

func embedCase(rows, cols, token int, heavy bool, gen func(*rand.Rand) *quant.Matrix) Case {
	return Case{
		Name: fmt.Sprintf("embed_q4/%dx%d_tok%d", rows, cols, token), Kernels: []string{"embed_q4"}, Tol: embedTol, Heavy: heavy,
		Shape: fmt.Sprintf("vocab %d × hidden %d, token %d read from the step buffer", rows, cols, token),
		Run: func(c *Ctx) error {
			e := gen(c.R)
			prev := RandFloats(c.R, e.Cols, 1)
			bs := kernels.EmbedBuffers[int]{Embed: c.QM("embed", e), Step: c.In("step", []uint32{17, uint32(token)}), Out: c.InOut("out", prev)}
			c.Add(kernels.EmbedCall(e.Cols, e.Rows, bs), false)
			if err := c.Step(); err != nil {
				return err
			}
			return c.embedCompare(c.F32(bs.Out), kernels.Embed(e, uint32(token), prev))
		},
	}
}

// embedCompare measures the rows against the reference, and on the emulator requires them
// bit-exact (quant.Matrix.DequantRow's operations).
func (c *Ctx) embedCompare(got, want []float32) error {
	c.Rel("out", got, want)
	if c.Kind == Emu {
		return Bits("out", got, want)
	}
	return nil
}

// embedBatchCase runs rows decode rows' tokens through one embed_q4 dispatch and checks each row
// against the reference and, bit for bit, against a one-row dispatch (EmbedCall) on its step.
func embedBatchCase(vocab, hidden, rows int) Case {
	kernel := fmt.Sprintf("embed_q4+rows%d", rows)
	return Case{
		Name: fmt.Sprintf("%s/%dx%d", kernel, vocab, hidden), Kernels: []string{kernel}, Tol: embedTol,
		Shape: fmt.Sprintf("vocab %d × hidden %d, %d rows' {pos, token} in one dispatch and one at a time", vocab, hidden, rows),
		Run: func(c *Ctx) error {
			e := quant.Quantize(RandFloats(c.R, vocab*hidden, 0.02), vocab, hidden, 4)
			steps := make([]uint32, 2*rows)
			for r := range rows {
				steps[2*r], steps[2*r+1] = uint32(100+r), uint32(c.R.IntN(vocab))
			}
			if rows > 1 {
				steps[2*rows-1] = uint32(vocab + 2) // past the end: the host's row, left as it was
			}
			em := c.QM("embed", e)
			prev := RandFloats(c.R, rows*hidden, 1)
			all := kernels.EmbedBuffers[int]{Embed: em, Step: c.In("steps", steps), Out: c.InOut("out", prev)}
			c.Add(kernels.EmbedRowsCall(hidden, vocab, rows, all), false)
			one := make([]int, rows)
			for r := range rows {
				one[r] = c.InOut(fmt.Sprintf("row%d.out", r), prev[r*hidden:(r+1)*hidden])
				c.Add(kernels.EmbedCall(hidden, vocab, kernels.EmbedBuffers[int]{Embed: em, Step: c.In(fmt.Sprintf("row%d.step", r), steps[2*r:2*r+2]), Out: one[r]}), false)
			}
			if err := c.Step(); err != nil {
				return err
			}
			got := c.F32(all.Out)
			for r := range rows {
				row := got[r*hidden : (r+1)*hidden]
				if err := c.embedCompare(row, kernels.Embed(e, steps[2*r+1], prev[r*hidden:(r+1)*hidden])); err != nil {
					return fmt.Errorf("row %d of %d: %w", r, rows, err)
				}
				if err := Bits(fmt.Sprintf("row %d of %d: out", r, rows), row, c.F32(one[r])); err != nil {
					return fmt.Errorf("not batch-invariant (want the one-row dispatch on the row alone): %w", err)
				}
			}
			return nil
		},
	}
}
