package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/lifecycle/hub"
	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
)

func TestDoctorJSON(t *testing.T) {
	isolate(t, map[string][]byte{"config.json": []byte("{}")})
	out, err := execute(t, "doctor", "--output", "json")
	var got doctorOutput
	if jerr := json.Unmarshal([]byte(out), &got); jerr != nil {
		t.Fatalf("%v:\n%s", jerr, out)
	}
	var names []string
	for _, c := range got.Checks {
		names = append(names, c.Name)
		if runtime.GOOS != "darwin" && (c.Name == "macos" || c.Name == "chip" || c.Name == "context" || strings.HasPrefix(c.Name, "gpu")) && c.Status != syscheck.Skip {
			t.Errorf("%s: %s on %s, want skip", c.Name, c.Status, runtime.GOOS)
		}
	}
	if strings.Join(names, ",") != "macos,memory,chip,disk,model,gpu,gpu-memory,context" {
		t.Fatalf("checks %v", names)
	}
	if got.OK != (err == nil) || got.OK != (syscheck.Failed(got.Checks) == 0) {
		t.Fatalf("ok=%v but err=%v", got.OK, err)
	}
}

func TestDoctorTextAndExitCode(t *testing.T) {
	isolate(t, nil)
	// A damaged pull makes the model check fail, whatever the machine.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.bin"), []byte("short"), 0o644)
	raw, _ := json.Marshal(hub.Marker{Repo: "org/tiny", Revision: "v1", Files: []hub.File{{Path: "a.bin", Size: 10, SHA256: "00"}}})
	os.WriteFile(filepath.Join(dir, hub.MarkerName), raw, 0o644)

	out, err := execute(t, "doctor", "--model", dir)
	if err == nil || !regexp.MustCompile(`^doctor: \d of 8 checks failed$`).MatchString(err.Error()) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(out, "fail  model       damaged") || !strings.Contains(out, "fix: run `lily pull`") {
		t.Fatalf("output:\n%s", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !regexp.MustCompile(`^(pass|warn|fail|skip)  \S|^ {18}fix: `).MatchString(line) {
			t.Errorf("unexpected line %q", line)
		}
	}
	if _, err := execute(t, "doctor", "--output", "yaml"); err == nil || !strings.Contains(err.Error(), "expected json or text") {
		t.Fatalf("bad --output: %v", err)
	}
}
