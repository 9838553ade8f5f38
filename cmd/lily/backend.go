package main

import (
	"fmt"

	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/generate"
	"github.com/lilyformac/lily/engine/model"
)

// backends are the executors `--backend` can name.
var backends = []string{"cpu"}

// openBackend loads the checkpoint in dir for the named backend and returns a session factory.
func openBackend(name, dir string) (func() generate.Session, *model.Weights, error) {
	if dir == "" {
		return nil, nil, fmt.Errorf("--model DIR is required")
	}
	switch name {
	case "cpu":
		w, err := model.Load(dir)
		if err != nil {
			return nil, nil, err
		}
		m := cpu.New(w)
		return func() generate.Session { return m.NewSession() }, w, nil
	default:
		return nil, nil, fmt.Errorf("unknown backend %q (available: %v)", name, backends)
	}
}
