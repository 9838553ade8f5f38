//go:build !race

package quant

import (
	"math/rand/v2"
	"testing"
)

// The race detector makes sync.Pool drop items, so this runs without it.
func TestNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	m := randMatrix(rng, 4096, 1024, 4)
	x := randVec(rng, m.Cols)
	dst := make([]float32, m.Rows)
	in := NewInput(m.Cols)
	in.Set(x)
	outs, ins := [][]float32{dst, make([]float32, m.Rows)}, []*Input{in, in}
	for name, f := range map[string]func(){
		"MatVec":      func() { MatVec(m, dst, x) },
		"MatVecInput": func() { MatVecInput(m, dst, in) },
		"MatMul":      func() { MatMul(m, outs, ins) },
		"Input.Set":   func() { in.Set(x) },
	} {
		if n := testing.AllocsPerRun(20, f); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}
