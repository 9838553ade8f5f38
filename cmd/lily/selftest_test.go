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
	selftestOnly = []string{"qmv_q8/256x2048", "argmax_partial/n248320_g128_tg256_model", "e2e"}
	t.Cleanup(func() { selftestOnly = nil })
	out, err := execute(t, "doctor", "--selftest")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], "MSL emulator") || !strings.HasPrefix(lines[4], "3 of 3 checks passed in ") {
		t.Fatalf("output:\n%s", out)
	}
	line := regexp.MustCompile(`^PASS  (qmv_q8/256x2048|argmax_partial/n248320_g128_tg256_model|e2e) +worst=\S+ +tol=\S+ +\d+ ms  \S`)
	for _, l := range lines[1:4] {
		if !line.MatchString(l) {
			t.Errorf("line %q", l)
		}
	}

	selftestOnly = []string{"conv1d_step/c8192_g256_4steps"}
	out, err = execute(t, "doctor", "--selftest", "--output", "json")
	var got selftestOutput
	if jerr := json.Unmarshal([]byte(out), &got); jerr != nil || err != nil {
		t.Fatalf("%v %v:\n%s", err, jerr, out)
	}
	if c := got.Checks; !got.OK || got.Device != "emu" || !got.Emulated || len(c) != 1 || c[0].Case != "conv1d_step/c8192_g256_4steps" ||
		c[0].Kernel != "conv1d_step" || !strings.Contains(c[0].Shape, "8192 channels") || !c[0].Pass || c[0].Error == nil || c[0].Tolerance != 1e-6 {
		t.Fatalf("%+v", got)
	}
	for _, key := range []string{`"case"`, `"kernel"`, `"shape"`, `"error"`, `"tolerance"`, `"pass"`} {
		if !strings.Contains(out, key) {
			t.Errorf("the JSON has no %s:\n%s", key, out)
		}
	}
	if _, err := execute(t, "doctor", "--selftest", "--output", "yaml"); err == nil || !strings.Contains(err.Error(), "expected json or text") {
		t.Fatalf("bad --output: %v", err)
	}
}
