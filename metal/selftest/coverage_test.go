package selftest

import (
	"slices"
	"testing"

	"github.com/lilyformac/lily/metal/cases"
	"github.com/lilyformac/lily/metal/kernels"
)

// TestNotCoveredIsCurrent: every instance the coverage result excuses ships, and no case
// declares it (a family that moves to metal/cases takes its instances off the list).
func TestNotCoveredIsCurrent(t *testing.T) {
	var shipped []string
	for _, n := range kernels.Files() {
		shipped = append(shipped, cases.Instances(kernels.Source(n))...)
	}
	declared := map[string]string{}
	for _, c := range cases.All() {
		for _, k := range c.Instances() {
			declared[k] = c.Name
		}
	}
	for k, why := range notCovered {
		if !slices.Contains(shipped, k) {
			t.Errorf("%s (%s) is no shipped kernel instance", k, why)
		}
		if c, ok := declared[k]; ok {
			t.Errorf("%s is run by case %s: take it off notCovered", k, c)
		}
	}
}
