package main

import (
	"encoding/json"
	"testing"
)

// TestBenchConcurrentDrafts: bench --concurrent with --drafts=always runs the requests with and
// without drafting in the same run: the same tokens each way and alone, drafts accepted (the
// demo's greedy text repeats), both aggregate rates and their ratio reported; --drafts=off has
// no comparison.
func TestBenchConcurrentDrafts(t *testing.T) {
	run := func(mode string) concurrentOutput {
		t.Helper()
		out, err := execute(t, "bench", "--demo", "--concurrent", "2", "--ctx", "8", "--decode-steps", "24", "--drafts="+mode, "--output", "json")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var got concurrentOutput
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return got
	}
	got := run("always")
	d := got.Drafts
	if d == nil || !d.EqualToOff || !got.AllEqualSolo || d.Accepted == 0 || d.OffAggregateTokS <= 0 || d.Ratio <= 0 || d.Mode != "always" {
		t.Fatalf("drafts %+v, all equal solo %v", d, got.AllEqualSolo)
	}
	t.Logf("2 requests: %.1f tok/s with drafts, %.1f without (%.3f×); %d of %d drafts accepted", got.AggregateTokS, d.OffAggregateTokS, d.Ratio, d.Accepted, d.Drafted)
	if off := run("off"); off.Drafts != nil {
		t.Fatalf("--drafts=off compared with itself: %+v", off.Drafts)
	}
}
