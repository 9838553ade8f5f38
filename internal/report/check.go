package report

import (
	"math"

	"github.com/lilyformac/lily/metal/selftest"
)

// Check is one selftest result as the JSON reports it: the report's selftest and `lily doctor
// --selftest --output json`.
type Check struct {
	Case      string   `json:"case"`   // the kernel case (metal/cases), check, "coverage" or "e2e"
	Kernel    string   `json:"kernel"` // the kernel instances it runs
	Shape     string   `json:"shape"`
	Error     *float64 `json:"error"` // the worst error; null when NaN (unwritten output, or it did not run)
	Tolerance float64  `json:"tolerance"`
	Pass      bool     `json:"pass"`
	Worst     string   `json:"worst,omitempty"` // the element of the worst error: "out[17] = 1.25, want 1.5"
	Ms        float64  `json:"ms"`
	Failure   string   `json:"failure,omitempty"` // why it failed beyond its error, or could not run
	Skipped   string   `json:"skipped,omitempty"` // why it did not run: a tensor-op case where the device has none
}

// CheckOf is a result as the JSON reports it.
func CheckOf(r selftest.Result) Check {
	c := Check{Case: r.Case, Kernel: r.Kernel, Shape: r.Shape, Pass: r.Pass, Tolerance: r.Tolerance, Worst: r.Worst, Ms: float64(r.Duration.Microseconds()) / 1000}
	if !math.IsNaN(r.WorstError) && !math.IsInf(r.WorstError, 0) {
		c.Error = &r.WorstError
	}
	if r.Err != nil {
		c.Failure = r.Err.Error()
	}
	c.Skipped = r.Skipped
	return c
}
