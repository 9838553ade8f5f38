//go:build linux

package cases

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

// TestViTAttentionDeterministic: vit_attention's output is the same bit for bit in every thread
// order of the emulator (each output's sums are in a fixed order: key tiles in turn, fixed lanes,
// a fixed shuffle tree), over several key tiles and query blocks, both partial.
func TestViTAttentionDeterministic(t *testing.T) {
	const heads, hd, gh, gw = 2, 72, 4, 18 // 72 patches: 3 query blocks and 3 key tiles
	n, D := gh*gw, heads*hd
	lib := library(t, emu.Options{})
	qkv := RandFloats(rand.New(rand.NewPCG(1, 2)), n*3*D, 1.5)
	var first []byte
	for i, o := range emu.Orders {
		b := NewBuilder()
		out := b.Out("out", 4*n*D)
		b.Add(kernels.ViTAttentionCall(n, heads, hd, gw, kernels.ViTAttentionBuffers[int]{
			QKV: b.In("qkv", qkv), InvFreq: b.In("inv_freq", kernels.ViTInvFreq(hd, vitRopeTheta)), Out: out}), false)
		x, err := exec.New(EmuDevice(lib, o, uint64(i+1)), &b.Plan)
		if err != nil {
			t.Fatal(err)
		}
		b.Upload(x)
		if err := x.Step(); err != nil {
			t.Fatal(err)
		}
		got := bytes.Clone(x.Bytes(out))
		x.Close()
		if first == nil {
			first = got
		} else if !bytes.Equal(got, first) {
			t.Errorf("order %s: the output differs from order %s's", o, emu.Orders[0])
		}
	}
}
