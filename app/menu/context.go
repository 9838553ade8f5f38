package menu

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
)

// The context the engine will serve depends on this Mac: its memory picks the KV cache format
// and prefill chunk (gpu.DefaultsFor), and the GPU's working set (Metal's
// recommendedMaxWorkingSetSize, which a raised iogpu.wired_limit_mb moves) bounds the positions
// beside the weights, less the room kept for parallel sequences (gpu.Size). The app does not
// redo that sizing: it would have to link the GPU backend (metal/gpu, Metal through purego) into
// the AppKit binary and probe Metal itself, and any drift would put a wrong number into the
// setups. It asks the bundled engine instead: `lily doctor --output json` sizes the engine with
// serve's own code on this Mac and reports the numbers in "serving" (syscheck.Serving). Once the
// engine has reported its context (/status), that answer is used.

// DoctorContext reads the context lily serve will hold from `lily doctor --output json`'s output
// (its exit status does not matter: doctor fails when any check fails, and still reports).
func DoctorContext(out []byte) (int, error) {
	var doc struct {
		Checks  []syscheck.Check  `json:"checks"`
		Serving *syscheck.Serving `json:"serving"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, fmt.Errorf("lily doctor's output: %w", err)
	}
	switch s := doc.Serving; {
	case s == nil:
		for _, c := range doc.Checks {
			if c.Name == "context" {
				return 0, fmt.Errorf("lily doctor sized no context (%s): %s", c.Status, c.Detail)
			}
		}
		return 0, errors.New("lily doctor sized no context")
	case s.Error != "":
		return 0, fmt.Errorf("lily doctor: %s", s.Error)
	case s.Context < 1:
		return 0, fmt.Errorf("lily doctor sized a context of %d positions", s.Context)
	}
	return doc.Serving.Context, nil
}
