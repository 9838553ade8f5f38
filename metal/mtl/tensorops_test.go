package mtl

import (
	"strings"
	"testing"
)

// TestTensorOps: Apple10 from macOS 26.2 on (numerically: 26.10 is later than 26.2), nothing
// earlier, and a reason in words either way.
func TestTensorOps(t *testing.T) {
	for _, c := range []struct {
		family Family
		macOS  string
		ok     bool
		why    string
	}{
		{FamilyApple10, "26.2 (25C56)", true, "Apple10 GPU with macOS 26.2"},
		{FamilyApple10, "26.10", true, "macOS 26.10"},
		{FamilyApple10, "27.0", true, ""},
		{FamilyApple10, "26.1", false, "need macOS 26.2 or later"},
		{FamilyApple10, "26", false, "macOS 26:"},
		{FamilyApple10, "", false, "need macOS 26.2"},
		{FamilyApple10, "twenty-six", false, "need macOS 26.2"},
		{FamilyApple9, "26.3", false, "(Apple9) has no neural accelerators"},
		{0, "26.3", false, "(none) has no neural accelerators"},
	} {
		ok, why := TensorOps(c.family, c.macOS)
		if ok != c.ok || !strings.Contains(why, c.why) {
			t.Errorf("TensorOps(%v, %q) = %v, %q; want %v and %q in it", c.family, c.macOS, ok, why, c.ok, c.why)
		}
	}
}
