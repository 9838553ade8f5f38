//go:build linux

package server

import (
	"testing"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/gpu"
)

// TestDraftsServeSameAnswersEmu is TestDraftsServeSameAnswers on the emulated GPU, whose steps
// verify the drafts as groups of rows of the multi-row step: byte-identical answers with drafts
// always verified and with drafting off, drafts accepted, and verify groups in the steps (more
// rows than sequences). A third of the tokens: the emulator runs the demo's 151,680-row LM head.
func TestDraftsServeSameAnswersEmu(t *testing.T) {
	var gpus []*gpu.GPU
	sameAnswersWithDrafts(t, 0.3, func(w *model.Weights) backend.Backend {
		e, err := gpu.NewEmu(w, gpu.EmuOptions{GPUOptions: gpu.GPUOptions{MaxCtx: 4096, Parallel: 4}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		gpus = append(gpus, e)
		return e
	})
	steps, rows := gpus[1].Batched()
	groups := gpus[1].Groups()
	t.Logf("with drafts: %d multi-row steps of %d rows, %d verify groups", steps, rows, groups)
	if groups == 0 {
		t.Fatal("no verify group ran in a multi-row step")
	}
}
