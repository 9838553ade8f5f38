package menu

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// The context the engine will serve depends on this Mac: its memory picks the KV cache format
// and prefill chunk (gpu.DefaultsFor), and the GPU's working set (Metal's
// recommendedMaxWorkingSetSize, which a raised iogpu.wired_limit_mb moves) bounds the positions
// beside the weights, less the room kept for parallel sequences (gpu.ServedContext). The app does
// not redo that sizing: it would have to link the GPU backend (metal/gpu, Metal through purego)
// into the AppKit binary and probe Metal itself, and any drift would put a wrong number into
// the setups. It asks the bundled engine instead: `lily doctor --output json` sizes the context
// with serve's own code on this Mac, and its "context" check says the result. Once the engine
// has reported its context (/status), that answer is used.

// doctorContext matches the context check's detail (syscheck.ContextCheck): "lily serve holds
// the model's full N positions", "lily serve holds N positions: why", "lily serve holds only N
// positions, …".
var doctorContext = regexp.MustCompile(`^lily serve holds (?:only |the model's full )?(\d+) positions`)

// DoctorContext reads the context lily serve will hold from `lily doctor --output json`'s
// output (its exit status does not matter: doctor fails when any check fails, and still reports).
func DoctorContext(out []byte) (int, error) {
	var doc struct {
		Checks []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
			Detail string `json:"detail"`
		} `json:"checks"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, fmt.Errorf("lily doctor's output: %w", err)
	}
	for _, c := range doc.Checks {
		if c.Name != "context" {
			continue
		}
		m := doctorContext.FindStringSubmatch(c.Detail)
		if m == nil {
			return 0, fmt.Errorf("lily doctor's context check (%s): %s", c.Status, c.Detail)
		}
		return strconv.Atoi(m[1])
	}
	return 0, errors.New("lily doctor reported no context check")
}
