//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/emu"
)

// runEmbed gathers row token of e with embed_q4 and returns the output.
func runEmbed(t *testing.T, lib *emu.Library, e *quant.Matrix, token int, order emu.Order) []float32 {
	t.Helper()
	out := emu.NewBuffer(4 * e.Cols)
	out.Fill(0xFF)
	mustDispatch(t, lib, EmbedCall(e.Cols, e.Rows, EmbedBuffers[*emu.Buffer]{
		Embed: bufsOf(e), Step: emu.BufferOf([]uint32{17, uint32(token)}), Out: out,
	}), order, uint64(token))
	return out.Float32s()
}

func checkEmbed(t *testing.T, lib *emu.Library, e *quant.Matrix, token int, order emu.Order) {
	t.Helper()
	got, want := runEmbed(t, lib, e, token, order), Embed(e, token)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%dx%d token %d %v: out[%d] = %g, want %g (bit-exact)", e.Rows, e.Cols, token, order, i, got[i], want[i])
		}
	}
}

func TestEmbed(t *testing.T) {
	lib := library(t, emu.Options{}, "embed.metal")
	r := rand.New(rand.NewPCG(21, 22))
	for _, s := range []struct{ rows, cols int }{{1, 64}, {5, 128}, {37, 192}, {9, 960}, {3, 2048}} {
		e := quant.Quantize(randFloats(r, s.rows*s.cols, 0.02), s.rows, s.cols, 4)
		for _, order := range emu.Orders {
			for _, token := range []int{0, s.rows - 1, s.rows / 2, s.rows + 5} {
				t.Run(fmt.Sprintf("%dx%d_tok%d_%v", s.rows, s.cols, token, order), func(t *testing.T) {
					checkEmbed(t, lib, e, token, order)
				})
			}
		}
	}
	t.Log("all rows bit-exact with quant.Matrix.DequantRow")
}

// TestEmbedProduction gathers from a tall embedding of the model's width (2048) whose row
// offsets need more than 16 bits.
func TestEmbedProduction(t *testing.T) {
	lib := library(t, emu.Options{}, "embed.metal")
	r := rand.New(rand.NewPCG(23, 24))
	const rows, cols = 70000, 2048
	e := &quant.Matrix{Rows: rows, Cols: cols, Bits: 4,
		Words: make([]uint32, rows*cols/8), Scales: make([]uint16, rows*cols/64), Biases: make([]uint16, rows*cols/64)}
	for i := range e.Words {
		e.Words[i] = r.Uint32()
	}
	for i := range e.Scales {
		e.Scales[i] = quant.F32ToBF16(float32(r.NormFloat64()) * 0.01)
		e.Biases[i] = quant.F32ToBF16(float32(r.NormFloat64()) * 0.05)
	}
	for i, token := range []int{0, 65537, rows - 1} {
		checkEmbed(t, lib, e, token, emu.Orders[i%3])
	}
}

func TestEmbedASan(t *testing.T) {
	lib := library(t, emu.Options{ASan: true}, "embed.metal")
	r := rand.New(rand.NewPCG(25, 26))
	e := quant.Quantize(randFloats(r, 7*192, 0.02), 7, 192, 4)
	checkEmbed(t, lib, e, 6, emu.Shuffle)
	checkEmbed(t, lib, e, 0, emu.Reverse)
}

// TestEmbedChunk: each row of a chunk is its token's row, bit-exact, in every thread order and
// under ASan.
func TestEmbedChunk(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	e := quant.Quantize(randFloats(r, 37*192, 0.02), 37, 192, 4)
	tokens := []uint32{3, 0, 36, 3, 17}
	for _, asan := range []bool{false, true} {
		lib := library(t, emu.Options{ASan: asan}, "embed.metal")
		for _, order := range emu.Orders {
			out := emu.NewBuffer(4 * len(tokens) * 192)
			out.Fill(0xFF)
			mustDispatch(t, lib, EmbedChunkCall(192, 37, len(tokens), EmbedChunkBuffers[*emu.Buffer]{
				Embed: qbufs{Words: emu.BufferOf(e.Words), Scales: emu.BufferOf(e.Scales), Biases: emu.BufferOf(e.Biases)}, Tokens: emu.BufferOf(tokens), Out: out,
			}), order, 1)
			for i, tok := range tokens {
				for d, v := range Embed(e, int(tok)) {
					if got := out.Float32s()[i*192+d]; got != v {
						t.Fatalf("ASan %v %v: row %d (token %d) dim %d: %g, want %g", asan, order, i, tok, d, got, v)
					}
				}
			}
		}
	}
}
