package main

import (
	"fmt"
	"runtime"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/metal/decode"
)

// backends are the executors `--backend` can name: the Go reference, the Metal kernels on the MSL
// emulator (Linux), and the Metal kernels on the GPU (macOS).
var backends = []string{"cpu", "emu", "metal"}

const backendHelp = "executor: cpu (Go reference), emu (the Metal kernels on the MSL emulator, Linux) or metal (the GPU, macOS; the default there)"

// defaultBackend is metal on macOS, the Go reference elsewhere.
func defaultBackend() string {
	if runtime.GOOS == "darwin" {
		return "metal"
	}
	return "cpu"
}

// openBackend loads the checkpoint in dir for the named backend.
func openBackend(name, dir string) (backend.Backend, *model.Weights, error) {
	if dir == "" {
		return nil, nil, fmt.Errorf("--model DIR is required")
	}
	switch name {
	case "cpu":
	case "emu":
		if runtime.GOOS != "linux" {
			return nil, nil, fmt.Errorf("backend emu runs the Metal kernels on the MSL emulator, which needs Linux (this is %s/%s): use --backend cpu", runtime.GOOS, runtime.GOARCH)
		}
	case "metal":
		if runtime.GOOS != "darwin" {
			return nil, nil, fmt.Errorf("backend metal needs macOS on Apple silicon (this is %s/%s): use --backend cpu", runtime.GOOS, runtime.GOARCH)
		}
	default:
		return nil, nil, fmt.Errorf("unknown backend %q (available: %v)", name, backends)
	}
	w, err := model.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	if name == "metal" {
		// The same decode plan and encoder loop as emu, on the GPU (not yet run on a real Mac).
		b, err := decode.NewMetal(w, 0)
		if err != nil {
			w.Close()
			return nil, nil, fmt.Errorf("backend metal: %w", err)
		}
		return b, w, nil
	}
	if name == "emu" {
		// The decode plan run on the emulator: KV caches sized for the model's context, at most
		// decode.DefaultMaxCtx positions.
		b, err := decode.NewEmu(w, decode.EmuOptions{})
		if err != nil {
			w.Close()
			return nil, nil, fmt.Errorf("backend emu: %w", err)
		}
		return b, w, nil
	}
	return cpu.New(w), w, nil
}
