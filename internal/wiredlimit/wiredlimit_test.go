package wiredlimit

import "testing"

// TestSuggested: the suggested limit leaves macOS 4 GiB (at least 3 GiB, the brief's floor), and
// the text names the exact command, what the GPU gets, what macOS keeps, and that it lasts until
// a restart.
func TestSuggested(t *testing.T) {
	for _, tc := range []struct {
		gb   uint64
		mb   uint64
		line string
	}{
		{24, 20480, "sudo sysctl iogpu.wired_limit_mb=20480 lets the GPU use up to 20 GB of this Mac's 24 GB and leaves macOS 4 GB; it lasts until the Mac restarts (run it again after each restart)"},
		{32, 28672, "sudo sysctl iogpu.wired_limit_mb=28672 lets the GPU use up to 28 GB of this Mac's 32 GB and leaves macOS 4 GB; it lasts until the Mac restarts (run it again after each restart)"},
		{36, 32768, "sudo sysctl iogpu.wired_limit_mb=32768 lets the GPU use up to 32 GB of this Mac's 36 GB and leaves macOS 4 GB; it lasts until the Mac restarts (run it again after each restart)"},
		{8, 0, ""},
		{0, 0, ""},
	} {
		mem := tc.gb << 30
		mb := SuggestedMB(mem)
		if mb != tc.mb {
			t.Errorf("%d GB: SuggestedMB %d, want %d", tc.gb, mb, tc.mb)
		}
		if mb > 0 && mem-mb<<20 < 3<<30 {
			t.Errorf("%d GB: %d MiB leaves macOS less than 3 GiB", tc.gb, mb)
		}
		if got := Advice(mem); got != tc.line {
			t.Errorf("%d GB: Advice\n%q\nwant\n%q", tc.gb, got, tc.line)
		}
	}
	if got := GB(20<<30 + 1<<29); got != "20.5 GB" {
		t.Errorf("GB: %q", got)
	}
}
