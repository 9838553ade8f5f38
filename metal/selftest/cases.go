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

// notCovered are the shipped kernel instances no case runs, each with the reason; the coverage
// result fails for any other. Every family is in metal/cases (sample_probe, the sampler's
// soft-float test hook, runs as cases too), so none is excused; an entry needs a reason no case
// can run the instance.
var notCovered = map[string]string{}
