package mtl

import "testing"

func TestPlanNoCopy(t *testing.T) {
	const page = 16384
	tests := []struct {
		name           string
		mapLen, off, n int
		window         Span
		offset         int
		copy           Span
	}{
		{"whole aligned mapping", 4 * page, 0, 4 * page, Span{0, 4 * page}, 0, Span{}},
		{"unaligned start keeps leading bytes uncopied", 4 * page, 100, 2 * page, Span{0, 3 * page}, 100, Span{}},
		{"unaligned end inside the mapping rounds up", 4 * page, page, page + 5, Span{page, 2 * page}, 0, Span{}},
		{"safetensors-like: data from byte 8+header to an unaligned EOF", 3*page + 123, 8 + 4000, 3*page + 123 - 4008,
			Span{0, 3 * page}, 4008, Span{3 * page, 123}},
		{"range inside the last partial page", 3*page + 500, 3*page + 10, 400, Span{}, 0, Span{3*page + 10, 400}},
		{"mapping rounded up to a page by the caller", 4 * page, 8 + 4000, 3*page + 123 - 4008,
			Span{0, 4 * page}, 4008, Span{}},
		{"empty range", page, 10, 0, Span{}, 0, Span{}},
		{"mapping shorter than a page", 1000, 0, 1000, Span{}, 0, Span{0, 1000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanNoCopy(tc.mapLen, tc.off, tc.n, page)
			if err != nil {
				t.Fatal(err)
			}
			if p.Window != tc.window || p.Offset != tc.offset || p.Copy != tc.copy {
				t.Fatalf("PlanNoCopy(%d, %d, %d) = %+v, want window %+v offset %d copy %+v",
					tc.mapLen, tc.off, tc.n, p, tc.window, tc.offset, tc.copy)
			}
			checkPlan(t, p, tc.mapLen, tc.off, tc.n, page)
		})
	}
}

// checkPlan asserts the plan's invariants: the window is page-aligned and inside the mapping's
// whole pages, and window plus copy cover the range exactly once.
func checkPlan(t *testing.T, p NoCopyPlan, mapLen, off, n, page int) {
	t.Helper()
	if p.Window.Len > 0 {
		if p.Window.Off%page != 0 || p.Window.Len%page != 0 {
			t.Fatalf("window %+v not page-aligned", p.Window)
		}
		if p.Window.End() > mapLen&^(page-1) {
			t.Fatalf("window %+v past the mapping's whole pages (%d bytes)", p.Window, mapLen)
		}
		if p.Window.Off+p.Offset != off {
			t.Fatalf("offset %d does not locate byte %d in window %+v", p.Offset, off, p.Window)
		}
	}
	covered := 0
	if p.Window.Len > 0 {
		covered = min(p.Window.End(), off+n) - off
	}
	if covered+p.Copy.Len != n {
		t.Fatalf("window covers %d and copy %d bytes of a %d-byte range", covered, p.Copy.Len, n)
	}
	if p.Copy.Len > 0 && p.Copy.End() != off+n {
		t.Fatalf("copy %+v does not end the range at %d", p.Copy, off+n)
	}
}

func TestPlanNoCopyExhaustive(t *testing.T) {
	const page = 64
	for mapLen := 0; mapLen <= 4*page+3; mapLen += 7 {
		for off := 0; off <= mapLen; off += 5 {
			for n := 0; off+n <= mapLen; n += 11 {
				p, err := PlanNoCopy(mapLen, off, n, page)
				if err != nil {
					t.Fatal(err)
				}
				checkPlan(t, p, mapLen, off, n, page)
			}
		}
	}
}

func TestPlanNoCopyErrors(t *testing.T) {
	for _, tc := range []struct{ mapLen, off, n, page int }{
		{100, 0, 101, 16}, {100, -1, 10, 16}, {100, 10, -1, 16}, {100, 0, 10, 0}, {100, 0, 10, 24},
		{1 << 62, 1 << 62, 1 << 62, 16}, // off+n overflows
	} {
		if _, err := PlanNoCopy(tc.mapLen, tc.off, tc.n, tc.page); err == nil {
			t.Errorf("PlanNoCopy(%d, %d, %d, %d): no error", tc.mapLen, tc.off, tc.n, tc.page)
		}
	}
}
