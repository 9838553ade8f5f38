package decode

import (
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
)

// servedMemory is the memory of the production plan as a Mac of that working set serves it by
// default: Macs under 32 GB with the int8 KV cache and the 512-token chunk, larger ones bf16
// and the 4,096-token chunk (gpu.DefaultsFor, DefaultChunks; decode cannot import gpu).
func servedMemory(t *testing.T, kvBits, chunk int) Memory {
	t.Helper()
	m, err := MemoryOfChunked(config.Production(), kvBits, chunk)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSessionsPages: one sequence keeps a session's pages and its spare; several need their
// share of ParallelContext each, or one alone the whole context, whichever is more.
func TestSessionsPages(t *testing.T) {
	ps := DefaultPageSize
	pages := func(n int) int { return (n+ps-1)/ps + 1 }
	for _, ctx := range []int{100, 4096, 128256, 262144} {
		if got := SessionsPages(ctx, 1, ps); got != pages(ctx) {
			t.Errorf("ctx %d, one sequence: %d pages, want %d", ctx, got, pages(ctx))
		}
		for n := 2; n <= MaxParallel; n++ {
			want := max(pages(ctx), n*pages(min(ctx, ParallelContext)))
			if got := SessionsPages(ctx, n, ps); got != want || got < SessionsPages(ctx, n-1, ps) {
				t.Errorf("ctx %d, %d sequences: %d pages, want %d", ctx, n, got, want)
			}
		}
	}
}

// TestParallelByMemory: the sequences that run at once at the context one session gets grow
// with the working set, are at least one wherever that session fits, never more than
// MaxParallel, and the N sequences' pages and states fit while N+1's do not.
func TestParallelByMemory(t *testing.T) {
	c := config.Production()
	for _, m := range []Memory{servedMemory(t, 8, 512), servedMemory(t, 16, 4096)} {
		prev := 0
		for ws := int64(16 << 30); ws <= 128<<30; ws += 1 << 29 {
			ctx, _, err := m.Context(c, 0, ws)
			n, why := m.Parallel(ctx, ws)
			switch {
			case n < prev || n > MaxParallel:
				t.Fatalf("%d-bit KV, %.1f GiB: %d sequences after %d", m.KVBits, float64(ws)/(1<<30), n, prev)
			case (err == nil) != (n >= 1):
				t.Fatalf("%d-bit KV, %.1f GiB: %d sequences, context %d (%v)", m.KVBits, float64(ws)/(1<<30), n, ctx, err)
			case n >= 1 && !m.fitsParallel(ctx, n, ws), n >= 1 && n < MaxParallel && m.fitsParallel(ctx, n+1, ws):
				t.Fatalf("%.1f GiB: %d sequences is not the most that fit", float64(ws)/(1<<30), n)
			case why == "":
				t.Fatalf("%.1f GiB: %d sequences, no reason", float64(ws)/(1<<30), n)
			}
			prev = n
		}
		if prev != MaxParallel {
			t.Errorf("%d-bit KV, 128 GiB: %d sequences, want the cap %d", m.KVBits, prev, MaxParallel)
		}
	}
	if n, why := servedMemory(t, 16, 4096).Parallel(c.MaxPositions, 0); n != MaxParallel || why == "" {
		t.Errorf("no working set known: %d (%q)", n, why)
	}
}

// TestParallelBytes: the N sequences' KV pages, states and rows of scratch, the weights, the
// rest of the scratch and the reserve stay within the working set.
func TestParallelBytes(t *testing.T) {
	c := config.Production()
	m := servedMemory(t, 16, 4096)
	ws := MacWorkingSet(36)
	ctx, _, err := m.Context(c, 0, ws)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := m.Parallel(ctx, ws)
	kv := int64(SessionsPages(ctx, n, m.PageSize)) * int64(m.PageSize) * m.KVPerPosition
	used := reserve + m.Weights + m.Scratch + int64(n-1)*m.RowScratch + int64(n)*m.State + kv
	if n < 2 || used > ws {
		t.Errorf("36 GB: %d sequences use %d of %d bytes", n, used, ws)
	}
}

// TestParallel24And32GB: a 24 GB Mac runs nothing at macOS's default GPU limit (the weights do
// not fit) and one sequence once the limit is raised to 20 GiB (iogpu.wired_limit_mb=20480), its
// 110k positions filling the working set; on 32 GB one session's context fills it too, and a
// lower --ctx leaves room for more.
func TestParallel24And32GB(t *testing.T) {
	c := config.Production()
	small := servedMemory(t, 8, 512)
	ws24 := MacWorkingSet(24)
	ctx, _, err := small.Context(c, 0, ws24)
	if n, why := small.Parallel(ctx, ws24); err == nil || n != 0 || !strings.Contains(why, "fits") {
		t.Errorf("24 GB: %d sequences (%q), context %d %v", n, why, ctx, err)
	}
	ctx, _, err = small.Context(c, 0, 20<<30)
	if n, _ := small.Parallel(ctx, 20<<30); err != nil || n != 1 {
		t.Errorf("24 GB raised: %d sequences at %d positions (%v)", n, ctx, err)
	}
	m := servedMemory(t, 16, 512)
	ws32 := MacWorkingSet(32)
	ctx, _, _ = m.Context(c, 0, ws32)
	n, why := m.Parallel(ctx, ws32)
	if more, _ := m.Parallel(ParallelContext, ws32); n != 1 || more < 2 || !strings.Contains(why, "lower --ctx") {
		t.Errorf("32 GB: %d at %d positions (%q), %d at %d", n, ctx, why, more, ParallelContext)
	}
}

// TestRowScratch: without a chunk mode all scratch is the decode step's; a chunk's activations
// add to the scratch but not to what a row holds.
func TestRowScratch(t *testing.T) {
	plain, chunked := servedMemory(t, 16, 0), servedMemory(t, 16, 4096)
	if plain.RowScratch != plain.Scratch || chunked.RowScratch != plain.RowScratch || chunked.Scratch <= plain.Scratch {
		t.Errorf("row scratch %d of %d without a chunk, %d of %d with one", plain.RowScratch, plain.Scratch, chunked.RowScratch, chunked.Scratch)
	}
}

// TestRoomForParallel: where one session's context fills the working set, the default context
// gives up the least whole pages for as many sequences as an eighth of it makes room for (up to
// DefaultParallel); where they fit already, the context stays.
func TestRoomForParallel(t *testing.T) {
	c := config.Production()
	m := servedMemory(t, 16, 512)
	for _, gb := range []int{32, 36, 64} {
		ws := MacWorkingSet(gb)
		ctx, _, err := m.Context(c, 0, ws)
		if err != nil {
			t.Fatal(err)
		}
		got, why := m.RoomForParallel(ctx, ws)
		n, _ := m.Parallel(got, ws)
		before, _ := m.Parallel(ctx, ws)
		floor, _ := m.Parallel(ctx-ctx/8, ws)
		want := max(before, min(floor, DefaultParallel))
		switch {
		case want == before && (got != ctx || why != ""):
			t.Errorf("%d GB: %d sequences fit at %d, yet the context became %d (%s)", gb, before, ctx, got, why)
		case want > before && (n < want || got > ctx || got < ctx-ctx/8 || got%m.PageSize != 0 || why == ""):
			t.Errorf("%d GB: %d → %d positions, %d sequences fit, want %d (%s)", gb, ctx, got, n, want, why)
		case want > before:
			if more, _ := m.Parallel(got+m.PageSize, ws); more >= want {
				t.Errorf("%d GB: %d positions given up, a page fewer would do", gb, ctx-got)
			}
			t.Logf("%d GB: %d → %d positions, %d sequences rather than %d (%s)", gb, ctx, got, n, before, why)
		}
		if gb == 32 && want <= before {
			t.Errorf("32 GB: %d sequences at %d positions, no room made", before, ctx)
		}
	}
	if got, why := m.RoomForParallel(1000, MacWorkingSet(24)); got != 1000 || why != "" {
		t.Errorf("24 GB: a context that cannot make room kept? %d (%s)", got, why)
	}
}
