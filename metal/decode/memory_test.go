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
	m, err := MemoryOf(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	ws32 := MacWorkingSet(32)
	n, why, err := m.Context(c, 0, ws32)
	want := int((ws32-reserve-m.Weights-m.State-m.Scratch)/(m.KVPerPosition*DefaultPageSize)-1) * DefaultPageSize
	if err != nil || n != want || m.Session(n) > ws32-reserve-m.Weights || !strings.Contains(why, "iogpu.wired_limit_mb") {
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
	if _, why, _ := m.Context(c, 0, ws32); !strings.Contains(why, "--kv-bits 8") {
		t.Fatalf("a bf16 cache that holds less than the model's context does not suggest --kv-bits 8: %q", why)
	}
}

// TestKV8Memory: an 8-bit KV cache takes 256 + 16 bytes per head row (codes and 8 binary16
// scales) instead of 512, so about 1.9× the positions fit on a 32 GB Mac.
func TestKV8Memory(t *testing.T) {
	c := config.Production()
	m16, err16 := MemoryOf(c, 16)
	m8, err8 := MemoryOf(c, 8)
	if err16 != nil || err8 != nil {
		t.Fatal(err16, err8)
	}
	attnLayers := int64(0)
	for _, k := range c.Layers {
		if k == config.FullAttention {
			attnLayers++
		}
	}
	kv := int64(2 * c.NumKVHeads)
	if m16.KVPerPosition != attnLayers*kv*512 || m8.KVPerPosition != attnLayers*kv*(256+16) || m8.KVBits != 8 {
		t.Fatalf("KV per position: bf16 %d, 8-bit %d (%d attention layers)", m16.KVPerPosition, m8.KVPerPosition, attnLayers)
	}
	if m8.Weights != m16.Weights || m8.State != m16.State {
		t.Fatalf("the KV format changed weights or state: %+v vs %+v", m8, m16)
	}
	ws := MacWorkingSet(32)
	n16, _, _ := m16.Context(c, 0, ws)
	n8, why, _ := m8.Context(c, 0, ws)
	if n8 < n16*18/10 || strings.Contains(why, "--kv-bits") {
		t.Fatalf("32 GB: %d positions with 8-bit KV vs %d with bf16 (%q)", n8, n16, why)
	}
	if _, err := MemoryOf(c, 4); err == nil {
		t.Fatal("a 4-bit KV cache was accepted")
	}
}
