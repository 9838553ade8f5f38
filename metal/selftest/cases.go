package selftest

import (
	"strings"

	"github.com/lilyformac/lily/metal/cases"
)

// selected says whether name is asked for by only: an entry equal to it, or to its kernel family
// (the part before "/": "conv1d_step" selects every conv1d_step case). No entries select all.
func selected(only []string, name string) bool {
	if len(only) == 0 {
		return true
	}
	family, _, _ := strings.Cut(name, "/")
	for _, n := range only {
		if n == name || n == family {
			return true
		}
	}
	return false
}

// caseResult is a case's result as the selftest reports it.
func caseResult(r cases.Result) Result {
	return Result{Case: r.Case, Kernel: r.Kernel, Shape: r.Shape, Pass: r.Pass, WorstError: r.Error, Tolerance: r.Tolerance,
		Worst: r.Worst, Duration: r.Duration, Err: r.Err}
}

// notCovered are the shipped kernel instances no case and no remaining check runs yet, each with
// the reason; the coverage result fails for any other. The list only shrinks: each family that
// moves to metal/cases brings its instances' cases with it.
var notCovered = map[string]string{
	"sample_probe": "a test hook of the sampler's soft float (sample.metal), not dispatched by the product; the sampler's cases are not in metal/cases yet",
}
