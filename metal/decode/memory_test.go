package decode

import (
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
)

// TestContextFromWorkingSet: the context is what fits beside the weights, capped at the model's;
// an asked context that does not fit, or weights that do not, is a clear error.
func TestContextFromWorkingSet(t *testing.T) {
	c := config.Production()
	m, err := MemoryOf(c)
	if err != nil {
		t.Fatal(err)
	}
	ws32 := MacWorkingSet(32)
	n, why, err := m.Context(c, 0, ws32)
	if want := int((ws32 - reserve - m.Weights - m.State - m.Scratch) / m.KVPerPosition); err != nil || n != want || !strings.Contains(why, "iogpu.wired_limit_mb") {
		t.Fatalf("32 GB: %d %q %v, want %d", n, why, err, want)
	}
	if n, why, err := m.Context(c, 0, MacWorkingSet(64)); err != nil || n != c.MaxPositions || why != "" {
		t.Fatalf("64 GB: %d %q %v", n, why, err)
	}
	if n, _, err := m.Context(c, 32768, ws32); err != nil || n != 32768 {
		t.Fatalf("--ctx 32768 on 32 GB: %d %v", n, err)
	}
	if _, _, err := m.Context(c, 200000, ws32); err == nil || !strings.Contains(err.Error(), "--ctx 200000") {
		t.Fatalf("--ctx 200000 on 32 GB: %v", err)
	}
	if _, _, err := m.Context(c, 0, MacWorkingSet(24)); err == nil || !strings.Contains(err.Error(), "do not fit") {
		t.Fatalf("24 GB: %v", err)
	}
	if _, _, err := m.Context(c, c.MaxPositions+1, 0); err == nil {
		t.Fatal("a context past the model's accepted")
	}
	if n, _, err := m.Context(c, 0, 0); err != nil || n != c.MaxPositions {
		t.Fatalf("no working set known: %d %v", n, err)
	}
}
