//go:build linux

package emu

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

// The tests in this file plant bugs and check that the emulator reports them.

// lineOf returns "buggy.metal:N" for the first line of testdata/buggy.metal containing s.
func lineOf(t *testing.T, s string) string {
	b, err := os.ReadFile("testdata/buggy.metal")
	if err != nil {
		t.Fatal(err)
	}
	for i, ln := range strings.Split(string(b), "\n") {
		if strings.Contains(ln, s) {
			return fmt.Sprintf("buggy.metal:%d", i+1)
		}
	}
	t.Fatalf("no line with %q", s)
	return ""
}

// mismatches counts the elements of got that differ from want.
func mismatches(got, want []float32) (bad int) {
	for i, v := range got {
		if v != want[i] {
			bad++
		}
	}
	return bad
}

func ramp(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(i%97) - 40
	}
	return s
}

// A missing barrier passes in forward order (thread i-1 happens to run first) and fails in
// reverse and shuffled order, where a thread reads threadgroup memory before its neighbour
// wrote it: the 0xFF poison makes that a NaN.
func TestMissingBarrierCaughtByOrder(t *testing.T) {
	l := testLib(t, Options{}, "buggy.metal")
	const n, group = 512, 256
	in := ramp(n)
	want := make([]float32, n)
	for i := range want {
		want[i] = in[i]
		if i%group > 0 {
			want[i] += in[i-1]
		}
	}
	run := func(kernel string, order Order) int {
		out := NewBuffer(4 * n)
		err := mustPipeline(t, l, kernel, nil).Dispatch(Dispatch{Threadgroups: [3]int{n / group}, Group: [3]int{group},
			Buffers: map[int]Binding{0: {Buffer: BufferOf(in)}, 1: {Buffer: out}}, Order: order, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		return mismatches(out.Float32s(), want)
	}
	for _, order := range Orders {
		if bad := run("neighbour_sum", order); bad != 0 {
			t.Errorf("correct kernel, %v order: %d wrong outputs", order, bad)
		}
	}
	if bad := run("neighbour_sum_no_barrier", Forward); bad != 0 {
		t.Errorf("missing barrier, forward order: %d wrong outputs; expected the bug to hide here", bad)
	}
	for _, order := range []Order{Reverse, Shuffle} {
		bad := run("neighbour_sum_no_barrier", order)
		if bad == 0 {
			t.Errorf("missing barrier, %v order: not caught", order)
		}
		t.Logf("missing barrier, %v order: %d of %d outputs wrong (NaN from poisoned threadgroup memory)", order, bad, n)
	}
}

// A simdgroup that reuses threadgroup memory after a SIMD-group call, trusting the other
// simdgroup to have read it by then, passes in the forward, reverse and shuffled orders (every
// thread reads before any goes past its next SIMD-group call) and fails in Ahead, where one
// simdgroup runs to the next barrier first; the double-buffered version passes in every order.
func TestReuseAfterSimdCallCaughtByAhead(t *testing.T) {
	l := testLib(t, Options{}, "buggy.metal")
	const n = 64
	want := make([]float32, n)
	for tid := range n {
		var acc float32
		other := (tid + 32) % n
		for r := range 4 {
			var v float32 // simd_sum of the other simdgroup's tid·4 + r
			for l := range 32 {
				v += float32((other/32*32+l)*4 + r)
			}
			acc = acc*2 + v + float32(other%32)
		}
		want[tid] = acc
	}
	run := func(kernel string, order Order, seed uint64) int {
		out := NewBuffer(4 * n)
		err := mustPipeline(t, l, kernel, nil).Dispatch(Dispatch{Threadgroups: [3]int{1}, Group: [3]int{n},
			Buffers: map[int]Binding{0: {Buffer: out}}, Order: order, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return mismatches(out.Float32s(), want)
	}
	for _, order := range Orders {
		if bad := run("exchange_double", order, 1); bad != 0 {
			t.Errorf("double-buffered, %v order: %d wrong outputs", order, bad)
		}
	}
	for _, order := range []Order{Forward, Reverse, Shuffle} {
		if bad := run("exchange_single", order, 1); bad != 0 {
			t.Errorf("single-buffered, %v order: %d wrong outputs; expected the bug to hide here", order, bad)
		}
	}
	for seed := range uint64(4) {
		if bad := run("exchange_single", Ahead, seed); bad == 0 {
			t.Errorf("single-buffered, ahead order, seed %d: not caught", seed)
		}
	}
}

// Reading threadgroup memory nobody wrote gives the poison (NaN), which the test sees.
func TestPoisonedThreadgroupMemory(t *testing.T) {
	l := testLib(t, Options{}, "buggy.metal")
	const groups, group = 3, 64 // two simdgroups: partial[2..31] are never written
	in := ramp(groups * group)
	for _, order := range Orders {
		for _, kernel := range []string{"group_sum", "group_sum_unguarded"} {
			out := NewBuffer(4 * groups)
			err := mustPipeline(t, l, kernel, nil).Dispatch(Dispatch{Threadgroups: [3]int{groups}, Group: [3]int{group},
				Buffers: map[int]Binding{0: {Buffer: BufferOf(in)}, 1: {Buffer: out}}, Order: order})
			if err != nil {
				t.Fatal(err)
			}
			for g, v := range out.Float32s() {
				var want float32
				for _, x := range in[g*group : (g+1)*group] {
					want += x
				}
				ok := v == want
				if kernel == "group_sum" && !ok {
					t.Errorf("%s %v: group %d = %v, want %v", kernel, order, g, v, want)
				}
				if kernel == "group_sum_unguarded" && !math.IsNaN(float64(v)) {
					t.Errorf("%s %v: group %d = %v, want NaN from the poison", kernel, order, g, v)
				}
			}
		}
	}
}

// A write one element past a buffer: in process the canary after the buffer reports it; the
// AddressSanitizer build reports the exact line.
func TestOutOfBoundsWrite(t *testing.T) {
	const n = 100
	in := ramp(n)
	dispatch := func(l *Library) error {
		return mustPipeline(t, l, "copy_off_by_one", nil).Dispatch(Dispatch{Threads: [3]int{n + 1}, Group: [3]int{32},
			Buffers: map[int]Binding{0: {Buffer: BufferOf(in)}, 1: {Buffer: NewBuffer(4 * n)}, 2: {Buffer: BufferOf([]uint32{n})}}})
	}
	err := dispatch(testLib(t, Options{}, "buggy.metal"))
	if err == nil || !strings.Contains(err.Error(), "past the end") || !strings.Contains(err.Error(), "index 1") {
		t.Errorf("in process: got %v, want a write past the end of buffer 1", err)
	}
	t.Logf("in process: %v", err)

	err = dispatch(testLib(t, Options{ASan: true}, "buggy.metal"))
	line := lineOf(t, "out[gid] = gid < n")
	if err == nil || !strings.Contains(err.Error(), "heap-buffer-overflow") || !strings.Contains(err.Error(), line) {
		t.Errorf("ASan: got %v, want a heap-buffer-overflow at %s", err, line)
	}
	t.Logf("ASan: %v", err)
}

// A read past the end is invisible in process (it reads the canary) and caught by ASan.
func TestOutOfBoundsReadASan(t *testing.T) {
	const n = 64
	l := testLib(t, Options{ASan: true}, "buggy.metal")
	err := mustPipeline(t, l, "read_past_end", nil).Dispatch(Dispatch{Threads: [3]int{n}, Group: [3]int{32},
		Buffers: map[int]Binding{0: {Buffer: BufferOf(ramp(n))}, 1: {Buffer: NewBuffer(4 * n)}}, Order: Shuffle})
	line := lineOf(t, "in[gid] + in[gid + 1]")
	if err == nil || !strings.Contains(err.Error(), "READ of size 4") || !strings.Contains(err.Error(), line) {
		t.Errorf("got %v, want a 4-byte read overflow at %s", err, line)
	}
	// The helper process restarts after a crash: the next dispatch works.
	err = mustPipeline(t, l, "read_past_end", nil).Dispatch(Dispatch{Threads: [3]int{n - 1}, Group: [3]int{32},
		Buffers: map[int]Binding{0: {Buffer: BufferOf(ramp(n))}, 1: {Buffer: NewBuffer(4 * n)}}})
	if err != nil {
		t.Errorf("after a crash: %v", err)
	}
}

func TestBarrierAndSimdMisuse(t *testing.T) {
	l := testLib(t, Options{}, "buggy.metal")
	out := NewBuffer(4 * 1024)
	n := BufferOf([]uint32{40})
	cases := []struct {
		kernel string
		want   []string
	}{
		{"early_return", []string{"reached by 40 of 64 threads", "threads {40..63} already returned", lineOf(t, "the early returners never get here")}},
		{"divergent_simd", []string{"divergent", lineOf(t, "v = simd_sum(v);  // not supported")}},
		{"too_much_threadgroup_memory", []string{"exceeds 32 KiB", lineOf(t, "threadgroup float big[10240];")}},
	}
	for _, c := range cases {
		for _, order := range Orders {
			err := mustPipeline(t, l, c.kernel, nil).Dispatch(Dispatch{Threadgroups: [3]int{2}, Group: [3]int{64},
				Buffers: map[int]Binding{0: {Buffer: out}, 1: {Buffer: n}}, Order: order})
			if err == nil {
				t.Errorf("%s %v: no error", c.kernel, order)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s %v: error %q lacks %q", c.kernel, order, err, w)
				}
			}
			if order == Forward {
				t.Logf("%s: %v", c.kernel, err)
			}
		}
	}
}

func TestThreadgroupOverflow(t *testing.T) {
	line := lineOf(t, "threadgroup float tile[64];")
	for _, asan := range []bool{false, true} {
		l := testLib(t, Options{ASan: asan}, "buggy.metal")
		err := mustPipeline(t, l, "tile_overflow", nil).Dispatch(Dispatch{Threadgroups: [3]int{1}, Group: [3]int{64},
			Buffers: map[int]Binding{0: {Buffer: NewBuffer(4 * 64)}}})
		want := []string{"past the end of the threadgroup variable declared at metal/emu/testdata/" + line}
		if asan {
			want = []string{"heap-buffer-overflow", lineOf(t, "tile[tid + 1] = 1.0f;")}
		}
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("ASan %v: got %v, want %q", asan, err, w)
			}
		}
	}
}

// A crashing kernel in an isolated library fails its dispatch, not the test process.
func TestIsolatedCrash(t *testing.T) {
	l := testLib(t, Options{Isolate: true}, "buggy.metal")
	out := NewBuffer(4 * 32)
	err := mustPipeline(t, l, "wild_write", nil).Dispatch(Dispatch{Threads: [3]int{32}, Group: [3]int{32}, Buffers: map[int]Binding{0: {Buffer: out}}})
	if err == nil || !strings.Contains(err.Error(), "segmentation fault") {
		t.Errorf("got %v, want a segmentation fault", err)
	}
	in := ramp(64)
	err = mustPipeline(t, l, "neighbour_sum", nil).Dispatch(Dispatch{Threads: [3]int{64}, Group: [3]int{64},
		Buffers: map[int]Binding{0: {Buffer: BufferOf(in)}, 1: {Buffer: NewBuffer(4 * 64)}}})
	if err != nil {
		t.Errorf("after the crash: %v", err)
	}
}
