//go:build linux

package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/plan"
)

// wrappingEmu stands in for Metal's no-copy path on the emulator: each wrapped tensor lands 48
// bytes into a larger buffer, so every binding must carry the view's offset.
type wrappingEmu struct {
	*exec.EmuDevice
	wraps  int
	refuse error // when set, every Wrap fails with it (as Metal does for a misaligned checkpoint)
}

func (d *wrappingEmu) Wrap(data []byte) (exec.Memory, int64, error) {
	if d.refuse != nil {
		return nil, 0, d.refuse
	}
	const pad = 48
	m, err := d.Alloc(plan.Buffer{Name: "wrapped", Size: int64(len(data) + pad)})
	if err != nil {
		return nil, 0, err
	}
	copy(m.Bytes()[pad:], data)
	d.wraps++
	return m, pad, nil
}

// decodeLibrary compiles the decode step's kernels for the emulator.
func decodeLibrary(t *testing.T) *emu.Library {
	t.Helper()
	lib, err := emu.Compile(emuSources(), emu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// recordLog returns a Logf that appends to *lines.
func recordLog(lines *[]string) func(string, ...any) {
	return func(format string, args ...any) { *lines = append(*lines, fmt.Sprintf(format, args...)) }
}

// TestWrappedWeightsMatchCopied: serving the quantized tensors as views at an offset gives the
// same logits, bit for bit, as copying them into their own buffers.
func TestWrappedWeightsMatchCopied(t *testing.T) {
	dir := "../../testdata/golden/tiny-b"
	g, w := goldenWeights(t, dir)
	lib := decodeLibrary(t)
	var logged []string
	o := GPUOptions{MaxCtx: 16, Logf: recordLog(&logged)}
	copied, err := NewGPU("emu", w, &exec.EmuDevice{Lib: lib}, o)
	if err != nil {
		t.Fatal(err)
	}
	dev := &wrappingEmu{EmuDevice: &exec.EmuDevice{Lib: lib}}
	wrapped, err := NewGPU("emu", w, dev, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(logged) != 0 {
		t.Fatalf("log lines with every tensor wrapped or none to wrap: %q", logged)
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

// TestRefusedWrapIsLogged: when the device refuses to wrap the checkpoint's tensors, they are
// copied, and one log line says how many and why.
func TestRefusedWrapIsLogged(t *testing.T) {
	dir := "../../testdata/golden/tiny-b"
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	lib := decodeLibrary(t)
	var logged []string
	dev := &wrappingEmu{EmuDevice: &exec.EmuDevice{Lib: lib}, refuse: errors.New("exec: tensor at 0x1008 is not 16-byte aligned")}
	g, err := NewGPU("metal", w, dev, GPUOptions{MaxCtx: 16, Logf: recordLog(&logged)})
	if err != nil {
		t.Fatal(err)
	}
	n := len(g.Step().Views(w))
	want := fmt.Sprintf("metal: %d of %d weight tensors (", n, n)
	if n == 0 || len(logged) != 1 || !strings.HasPrefix(logged[0], want) || !strings.HasSuffix(logged[0], "instead of wrapped in the mapped checkpoint: exec: tensor at 0x1008 is not 16-byte aligned") {
		t.Fatalf("log %q, want one line starting %q and naming the wrap error", logged, want)
	}
}
