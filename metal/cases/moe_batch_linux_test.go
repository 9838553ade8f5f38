//go:build linux

package cases

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/kernels"
)

// TestMoEBatchCoverage: every decode MoE instance has a multi-row case at every row count of the
// multi-row decode step; without moe_down_combine's 4-row cases the coverage names it.
func TestMoEBatchCoverage(t *testing.T) {
	rows := batchVariants(moeBatches)
	instances := []string{"moe_router", "moe_router_norm", "moe_gate_up", "moe_gate_up_norm", "moe_down_combine"}
	for _, k := range instances {
		if !slices.Contains(Instances(kernels.Source("moe.metal")), k) {
			t.Fatalf("moe.metal has no instance %s", k)
		}
	}
	all := All()
	if err := VariantCoverage(instances, all, rows); err != nil {
		t.Error(err)
	}
	less := slices.DeleteFunc(slices.Clone(all), func(c Case) bool {
		return slices.Contains(c.Kernels, "moe_down_combine+rows4")
	})
	err := VariantCoverage(instances, less, rows)
	if err == nil || err.Error() != "no case runs moe_down_combine in rows4" {
		t.Errorf("without moe_down_combine's 4-row cases: %v", err)
	}
}

// TestMoEBatchCatchesOneULP is the negative control of the MoE batch-invariance checks: one ulp
// added to row 1 of a 2-row result (act of moe_gate_up, res of moe_down_combine, a routing weight
// of moe_router) passes the reference's tolerance but fails the case, as the bits differ from the
// one-row dispatch on that row.
func TestMoEBatchCatchesOneULP(t *testing.T) {
	s := kernels.MoEShape{H: 128, E: 16, K: 4, I: 64, SI: 64}
	dev := EmuDevice(library(t, emu.Options{}), emu.Shuffle, 1)
	for _, tc := range []struct {
		c        Case
		buf      string
		at       int // the element bumped, in row 1
		rowElems int
		want     string
	}{
		{moeGateUpBatchCase(s, 2, false), "act", 5, s.ActLen(), "row 1 of 2: act[5] = "},
		{moeDownBatchCase(s, 2), "res", 7, s.H, "row 1 of 2: res[7] = "},
		{moeRouterBatchCase(s, 64, 2, false), "weights", 2, s.K + 1, "row 1 of 2: moe_router weights[2] = "},
	} {
		bump := func(_ Case, buf string, out []byte) {
			if buf == tc.buf {
				at := 4 * (tc.rowElems + tc.at)
				binary.LittleEndian.PutUint32(out[at:], binary.LittleEndian.Uint32(out[at:])+1)
			}
		}
		if r := Run(tc.c, dev, Options{Kind: Emu}); !r.Pass {
			t.Fatalf("unaltered: %s", r.Failure())
		}
		r := Run(tc.c, dev, Options{Kind: Emu, Corrupt: bump})
		const prefix = "not batch-invariant (want the one-row dispatch on the row alone): "
		if r.Pass || r.Err == nil || !(r.Error <= r.Tolerance) || !strings.HasPrefix(r.Err.Error(), prefix+tc.want) {
			t.Errorf("%s, one ulp off in row 1: %+v", tc.c.Name, r)
		}
	}
}

// TestMoEBatchIDs: the batched gate/up and down cases' rows choose distinct experts each, row 1
// sharing some of row 0's (not all), row 2 none of them, row 3 row 0's in another slot order,
// except row 5, which repeats row 0's first expert.
func TestMoEBatchIDs(t *testing.T) {
	for _, s := range []kernels.MoEShape{{E: 16, K: 4}, {E: 40, K: 5}, {E: 256, K: 8}} {
		ids := moeBatchIDs(rand.New(rand.NewPCG(1, 2)), s, 8)
		row := func(r int) []uint32 { return moeRow(ids, r, s.K) }
		shared := func(a, b []uint32) int {
			n := 0
			for _, e := range a {
				if slices.Contains(b, e) {
					n++
				}
			}
			return n
		}
		if r5 := row(5); r5[0] != row(0)[0] || r5[1] != r5[0] {
			t.Errorf("E %d: row 5 = %v, want row 0's first expert twice", s.E, r5)
		}
		for r := range 8 {
			want := s.K
			if r == 5 {
				want--
			}
			if got := slices.Compact(slices.Sorted(slices.Values(row(r)))); len(got) != want || int(got[len(got)-1]) >= s.E {
				t.Errorf("E %d: row %d = %v, want %d distinct experts below E", s.E, r, row(r), want)
			}
		}
		if n := shared(row(1), row(0)); n == 0 || n == s.K || shared(row(2), row(0)) != 0 ||
			shared(row(3), row(0)) != s.K || slices.Equal(row(3), row(0)) {
			t.Errorf("E %d: rows %v %v %v %v: want overlapping, disjoint and reordered choices", s.E, row(0), row(1), row(2), row(3))
		}
	}
}
