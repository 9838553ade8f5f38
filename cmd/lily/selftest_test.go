//go:build linux

package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestDoctorSelftest runs `lily doctor --selftest` in process on the emulator (a few kernel
// checks and the demo checkpoint end to end; metal/selftest's tests run them all).
func TestDoctorSelftest(t *testing.T) {
	selftestOnly = []string{"qmv_q8", "argmax", "e2e"}
	t.Cleanup(func() { selftestOnly = nil })
	out, err := execute(t, "doctor", "--selftest")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], "MSL emulator") || !strings.HasPrefix(lines[4], "3 of 3 checks passed in ") {
		t.Fatalf("output:\n%s", out)
	}
	line := regexp.MustCompile(`^PASS  (qmv_q8|argmax|e2e) +worst=\S+ +tol=\S+ +\d+ ms  \S`)
	for _, l := range lines[1:4] {
		if !line.MatchString(l) {
			t.Errorf("line %q", l)
		}
	}

	selftestOnly = []string{"conv1d_step"}
	out, err = execute(t, "doctor", "--selftest", "--output", "json")
	var got selftestOutput
	if jerr := json.Unmarshal([]byte(out), &got); jerr != nil || err != nil {
		t.Fatalf("%v %v:\n%s", err, jerr, out)
	}
	if !got.OK || got.Device != "emu" || !got.Emulated || len(got.Checks) != 1 || got.Checks[0].Kernel != "conv1d_step" ||
		!got.Checks[0].Pass || got.Checks[0].WorstError == nil || got.Checks[0].Tolerance != 1e-5 {
		t.Fatalf("%+v", got)
	}
	if _, err := execute(t, "doctor", "--selftest", "--output", "yaml"); err == nil || !strings.Contains(err.Error(), "expected json or text") {
		t.Fatalf("bad --output: %v", err)
	}
}
