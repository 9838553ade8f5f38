package main

import (
	"fmt"
	"runtime"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/model"
)

// backends are the executors `--backend` can name.
var backends = []string{"cpu"}

// openBackend loads the checkpoint in dir for the named backend.
func openBackend(name, dir string) (backend.Backend, *model.Weights, error) {
	if dir == "" {
		return nil, nil, fmt.Errorf("--model DIR is required")
	}
	switch name {
	case "cpu":
	case "metal":
		if runtime.GOOS != "darwin" {
			return nil, nil, fmt.Errorf("backend metal needs macOS on Apple silicon (this is %s/%s): use --backend cpu", runtime.GOOS, runtime.GOARCH)
		}
		return nil, nil, fmt.Errorf("backend metal is not available in this build yet: use --backend cpu")
	default:
		return nil, nil, fmt.Errorf("unknown backend %q (available: %v)", name, backends)
	}
	w, err := model.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	return cpu.New(w), w, nil
}
