package goldens

import (
	"path/filepath"
	"testing"
)

// TestBF16Yardstick: every committed golden records bfloat16-safe routing, transformers' own
// float32 and bfloat16 rows meet the yardstick, rows further off than transformers' bfloat16 run
// do not, and a golden whose routing is not safe is refused before any row is compared.
func TestBF16Yardstick(t *testing.T) {
	dirs, err := filepath.Glob("../../testdata/golden/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no goldens: %v", err)
	}
	for _, dir := range dirs {
		g := MustLoad(t, dir)
		if err := g.SafeRouting(); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for name, rows := range map[string][]float32{"float32": g.Prefill, "bfloat16": g.PrefillBF16} {
			if _, _, errs := g.BF16Check(rows); errs != nil {
				t.Errorf("%s: transformers' %s rows: %v", dir, name, errs)
			}
		}
		// Twice transformers' bfloat16 error at every position fails both bounds.
		off := make([]float32, len(g.PrefillBF16))
		for i, v := range g.PrefillBF16 {
			off[i] = v + (v - float32(g.PrefillF64[i]))
		}
		if _, _, errs := g.BF16Check(off); len(errs) == 0 {
			t.Errorf("%s: rows at twice transformers' bfloat16 error passed", dir)
		}
		unsafe := *g
		unsafe.Stats.MinRouterTopKGap = (RouteSafety - 1) * g.Stats.MaxRouterBF16Shift
		if _, _, errs := unsafe.BF16Check(g.Prefill); len(errs) != 1 || unsafe.SafeRouting() == nil {
			t.Errorf("%s: a golden with top-k gaps under %d× the bfloat16 shift: %v", dir, RouteSafety, errs)
		}
	}
}
