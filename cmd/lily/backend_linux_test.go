//go:build linux

package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestRunEmuMatchesCPU: `lily run --backend emu` keeps the cpu contract and chooses the same ids.
func TestRunEmuMatchesCPU(t *testing.T) {
	dir := "../../testdata/golden/tiny-a"
	prompt := "679,445,39,500,378,112,631,651"
	var outs []runOutput
	for _, b := range []string{"cpu", "emu"} {
		out, err := execute(t, "run", "--backend", b, "--model", dir, "--prompt-ids", prompt, "--max-tokens", "6", "--output", "json", "--ignore-eos")
		if err != nil {
			t.Fatal(b, err, out)
		}
		var r runOutput
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err, out)
		}
		outs = append(outs, r)
	}
	if !slices.Equal(outs[0].TokenIDs, outs[1].TokenIDs) || outs[1].Backend != "emu" || outs[1].PromptTokens != 8 || outs[1].CompletionTokens != 6 {
		t.Fatalf("cpu %+v, emu %+v", outs[0], outs[1])
	}
}

func TestUnknownBackendListsEmu(t *testing.T) {
	_, err := execute(t, "run", "--backend", "nope", "--model", "../../testdata/golden/tiny-a", "--prompt-ids", "1")
	if err == nil || !strings.Contains(err.Error(), "emu") {
		t.Fatalf("error %v", err)
	}
}

func TestDefaultBackendOffMacOS(t *testing.T) {
	if got := defaultBackend(); got != "cpu" {
		t.Fatalf("default backend on linux is %q, want cpu", got)
	}
}
