package gpu

import (
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/plan"
)

func TestBuckets(t *testing.T) {
	for n, want := range map[int][]int{0: nil, 8: {8}, 16: {16, 8}, 64: {64, 8}, 100: {100, 64, 8}, 512: {512, 64, 8}, 4096: {4096, 512, 64, 8}} {
		if got := Buckets(n); !slices.Equal(got, want) {
			t.Errorf("Buckets(%d) = %v, want %v", n, got, want)
		}
	}
}

// TestDefaultChunks: the 4,096-token chunk is taken only where its activations cost no context
// (the production model on Macs of 32 and 48 GB), or where the context asked for still fits.
func TestDefaultChunks(t *testing.T) {
	c := config.Production()
	for _, tc := range []struct {
		name    string
		o       GPUOptions
		largest int
	}{
		{"32 GB", GPUOptions{WorkingSet: decode.MacWorkingSet(32)}, ChunkMedium},
		{"32 GB, --ctx 32768", GPUOptions{WorkingSet: decode.MacWorkingSet(32), MaxCtx: 32768}, ChunkLarge},
		{"32 GB, --kv-bits 8", GPUOptions{WorkingSet: decode.MacWorkingSet(32), KVBits: 8}, ChunkMedium},
		{"48 GB", GPUOptions{WorkingSet: decode.MacWorkingSet(48)}, ChunkLarge},
		{"48 GB, every row's logits", GPUOptions{WorkingSet: decode.MacWorkingSet(48), ChunkLogits: true}, ChunkMedium},
		{"24 GB (nothing fits)", GPUOptions{WorkingSet: decode.MacWorkingSet(24)}, ChunkMedium},
	} {
		got, err := DefaultChunks(c, tc.o)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(got, Buckets(tc.largest)) {
			t.Errorf("%s: DefaultChunks = %v, want %v", tc.name, got, Buckets(tc.largest))
		}
		mem, chunks, err := memoryFor(c, GPUOptions{WorkingSet: tc.o.WorkingSet, KVBits: tc.o.KVBits, MaxCtx: tc.o.MaxCtx, ChunkLogits: tc.o.ChunkLogits, AutoChunks: true})
		if err != nil || !slices.Equal(chunks, got) {
			t.Fatalf("%s: memoryFor chunks %v (%v), want %v", tc.name, chunks, err, got)
		}
		if want, _ := decode.MemoryOfChunked(c, tc.o.KVBits, tc.largest); mem.Scratch != want.Scratch {
			t.Errorf("%s: memoryFor scratch %d, want the largest chunk's %d", tc.name, mem.Scratch, want.Scratch)
		}
	}
}

// TestSliceFor: the slice is the largest chunk the model puts within SliceTarget on a chip along
// its route — 512 tokens on an M4 Max (about 180 ms modelled), 64 on an M4 Pro, 8 on a base M1
// (reading the experts alone takes 280 ms there), 512 on an M5 Max either way — and without a
// chip the medium chunk; a route the chip cannot take gives the smallest.
func TestSliceFor(t *testing.T) {
	c := config.Production()
	chunks := Buckets(ChunkLarge)
	for _, tc := range []struct {
		chip  string
		route plan.Route
		want  int
	}{{"M4 Max", plan.Simdgroup, ChunkMedium}, {"M4 Pro", plan.Simdgroup, ChunkSmall}, {"M1", plan.Simdgroup, ChunkTiny}, {"", plan.Simdgroup, ChunkMedium},
		{"M5 Max", plan.Tensor, ChunkMedium}, {"M5 Max", plan.Simdgroup, ChunkMedium}, {"M4 Max", plan.Tensor, ChunkTiny}} {
		var chip *plan.Chip
		if tc.chip != "" {
			ch, ok := plan.ChipNamed(tc.chip)
			if !ok {
				t.Fatal(tc.chip)
			}
			chip = &ch
		}
		if got := SliceFor(c, chunks, 16, chip, tc.route); got != tc.want {
			t.Errorf("%q, %s route: slice %d, want %d", tc.chip, tc.route, got, tc.want)
		}
	}
}
