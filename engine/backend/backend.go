// Package backend defines what every executor (CPU reference, emulated Metal, Metal) offers the
// rest of Lily: sessions that consume tokens and return logits, and can be copied for reuse.
package backend

import "github.com/lilyformac/lily/engine/config"

// Backend runs one loaded model.
type Backend interface {
	Name() string
	Config() *config.Config
	NewSession() Session
}

// Session is one sequence's state on a backend.
type Session interface {
	// Forward feeds tokens at the next positions and returns a logits row for every token when
	// all is set, else for the last one.
	Forward(tokens []int, all bool) ([][]float32, error)
	// Pos is the number of tokens consumed.
	Pos() int
	// Clone returns an independent copy (a prefix-cache snapshot).
	Clone() Session
	// Bytes is the memory the session's caches hold.
	Bytes() int64
}
