//go:build linux

package decode

import (
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
	"github.com/lilyformac/lily/metal/plan"
)

// wrappingEmu stands in for Metal's no-copy path on the emulator: each wrapped tensor lands 48
// bytes into a larger buffer, so every binding must carry the view's offset.
type wrappingEmu struct {
	*exec.EmuDevice
	wraps int
}

func (d *wrappingEmu) Wrap(data []byte) (exec.Memory, int64, error) {
	const pad = 48
	m, err := d.Alloc(plan.Buffer{Name: "wrapped", Size: int64(len(data) + pad)})
	if err != nil {
		return nil, 0, err
	}
	copy(m.Bytes()[pad:], data)
	d.wraps++
	return m, pad, nil
}

// TestWrappedWeightsMatchCopied: serving the quantized tensors as views at an offset gives the
// same logits, bit for bit, as copying them into their own buffers.
func TestWrappedWeightsMatchCopied(t *testing.T) {
	dir := "../../testdata/golden/tiny-b"
	g, _, _ := readGolden(t, dir)
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var srcs []emu.Source
	for _, n := range KernelFiles {
		srcs = append(srcs, emu.Source{Name: kernels.Path(n), Code: kernels.Source(n)})
	}
	lib, err := emu.Compile(srcs, emu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	copied, err := NewGPU("emu", w, &exec.EmuDevice{Lib: lib}, 16)
	if err != nil {
		t.Fatal(err)
	}
	dev := &wrappingEmu{EmuDevice: &exec.EmuDevice{Lib: lib}}
	wrapped, err := NewGPU("emu", w, dev, 16)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(wrapped.Step().Views(w)); dev.wraps != want || want == 0 {
		t.Fatalf("%d tensors wrapped, want all %d quantized ones", dev.wraps, want)
	}
	prompt := g.PromptIDs[:4]
	a, err := copied.NewSession().Forward(prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := wrapped.NewSession().Forward(prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			t.Fatalf("position %d: wrapped weights give different logits", i)
		}
	}
}
