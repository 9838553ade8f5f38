//go:build linux

package cases

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/metal/emu"
)

// attnBatchInstances are the attention kernels of the multi-row decode step.
var attnBatchInstances = []string{"attn_qk_rope_kv", "attn_decode_partial", "attn_decode_combine"}

// TestAttnBatchCoverage: every attention instance of the multi-row decode step has a case at
// every row count (qmvBatches) in both KV formats; without the 8-row rope cases the coverage
// names them.
func TestAttnBatchCoverage(t *testing.T) {
	rows := batchVariants(qmvBatches)
	all := All()
	if err := VariantCoverage(attnBatchInstances, all, rows); err != nil {
		t.Error(err)
	}
	for _, k := range attnBatchInstances {
		for _, v := range rows {
			for _, bits := range []int{16, 8} {
				if !slices.ContainsFunc(all, func(c Case) bool {
					return slices.Contains(c.Kernels, k+"+"+v) && strings.Contains(c.Name, fmt.Sprintf("_kv%d_", bits))
				}) {
					t.Errorf("no case runs %s+%s with a %d-bit cache", k, v, bits)
				}
			}
		}
	}
	less := slices.DeleteFunc(slices.Clone(all), func(c Case) bool { return strings.HasPrefix(c.Name, "attn_qk_rope_kv+rows8/") })
	err := VariantCoverage(attnBatchInstances, less, rows)
	if err == nil || err.Error() != "no case runs attn_qk_rope_kv in rows8" {
		t.Errorf("without attn_qk_rope_kv's 8-row cases: %v", err)
	}
}

// TestAttnBatchCatchesOneULP is the negative control of the batch-invariance checks: one ulp
// added to one element of row 1 of the 2-row outputs (the attention output, a partial, the
// rotated queries) stays within the reference's tolerance but fails the case, as the bits differ
// from the one-row dispatch on that row.
func TestAttnBatchCatchesOneULP(t *testing.T) {
	byName := map[string]Case{}
	for _, c := range All() {
		byName[c.Name] = c
	}
	dev := EmuDevice(library(t, emu.Options{}), emu.Shuffle, 1)
	for _, x := range []struct {
		name, buf string
		at        int // float index into the buffer
		want      string
	}{
		{"attn_decode_partial+rows2/4_2_64_max320_kv16_pages11x64_s5", "out", 4*64 + 9, "row 1 of 2: out[9] = "},
		{"attn_decode_partial+rows2/4_2_64_max320_kv8_pages11x64_s5", "o_part", 4*5*64 + 3, "row 1 of 2: o_part[3] = "},
		{"attn_qk_rope_kv+rows2/4_2_64_max320_kv16_pages11x64_rot16_tg64", "q_rot", 4*64 + 70, "row 1 of 2: q[70] = "},
	} {
		c, ok := byName[x.name]
		if !ok {
			t.Fatalf("no case %s", x.name)
		}
		if r := Run(c, dev, Options{Kind: Emu}); !r.Pass {
			t.Fatalf("unaltered: %s", r.Failure())
		}
		bump := func(_ Case, buf string, out []byte) {
			if buf == x.buf {
				binary.LittleEndian.PutUint32(out[4*x.at:], binary.LittleEndian.Uint32(out[4*x.at:])+1)
			}
		}
		r := Run(c, dev, Options{Kind: Emu, Corrupt: bump})
		if r.Pass || r.Err == nil || !(r.Error <= r.Tolerance) || !strings.HasPrefix(r.Err.Error(), "not batch-invariant (want the one-row dispatch on the row alone): "+x.want) {
			t.Errorf("%s: one ulp off in row 1's %s: %+v", x.name, x.buf, r)
		}
	}
}
