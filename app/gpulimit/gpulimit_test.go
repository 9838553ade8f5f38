package gpulimit

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/decode"
)

// TestOffer: the exact command run for 24 and 32 GB Macs, and the words shown with it.
func TestOffer(t *testing.T) {
	o, ok := For(24<<30, 0)
	if !ok {
		t.Fatal("no offer on 24 GB")
	}
	want := []string{"/usr/bin/osascript", "-e", `do shell script "/usr/sbin/sysctl iogpu.wired_limit_mb=20480" with prompt "Lily needs more memory for the GPU than macOS allows by default. Raising the GPU memory limit to 20 GB leaves macOS 4 GB of this Mac's 24 GB, and lasts until the Mac restarts." with administrator privileges`}
	if !slices.Equal(o.Argv, want) {
		t.Errorf("24 GB argv\n%q\nwant\n%q", o.Argv, want)
	}
	if o.MB != 20480 || o.Title != "Raise the GPU Memory Limit to 20 GB…" {
		t.Errorf("24 GB: %d MiB, title %q", o.MB, o.Title)
	}
	if want := "Lets the GPU use up to 20 GB of this Mac's 24 GB, which leaves macOS 4 GB. It lasts until the Mac restarts. Asks once for an administrator's password to run: sudo sysctl iogpu.wired_limit_mb=20480"; o.Text != want {
		t.Errorf("24 GB text\n%q\nwant\n%q", o.Text, want)
	}
	if !strings.Contains(o.Done, "20 GB until the Mac restarts") || o.Problem == "" {
		t.Errorf("24 GB: done %q, problem %q", o.Done, o.Problem)
	}

	o, ok = For(32<<30, 0)
	if !ok || o.Argv[2] != `do shell script "/usr/sbin/sysctl iogpu.wired_limit_mb=28672" with prompt "Lily needs more memory for the GPU than macOS allows by default. Raising the GPU memory limit to 28 GB leaves macOS 4 GB of this Mac's 32 GB, and lasts until the Mac restarts." with administrator privileges` {
		t.Errorf("32 GB: %v %q", ok, o.Argv)
	}
	if !strings.Contains(o.Text, "up to 28 GB of this Mac's 32 GB, which leaves macOS 4 GB. It lasts until the Mac restarts.") {
		t.Errorf("32 GB text %q", o.Text)
	}

	if _, ok := For(24<<30, 20480); ok {
		t.Error("offered again once raised")
	}
	if _, ok := For(24<<30, 16384); !ok {
		t.Error("not offered above a lower limit set by hand")
	}
	if _, ok := For(0, 0); ok {
		t.Error("offered with the memory unknown")
	}
}

func TestQuoteAndWanted(t *testing.T) {
	if got := quote(`a "b" \c`); got != `a \"b\" \\c` {
		t.Errorf("quote: %s", got)
	}
	if !Wanted("gpu-memory: GPU working set 17.2 GB < 20.9 GB needed; fix: sudo sysctl iogpu.wired_limit_mb=20480 lets the GPU …") ||
		!Wanted("load: backend metal: the weights (18.2 GiB) and one session's state (0.2 GiB) do not fit in this GPU's working set of 16.0 GiB: raise iogpu.wired_limit_mb (sudo sysctl) or use a Mac with more memory") ||
		Wanted("checks: 16 GB of memory; the model needs 21 GB") {
		t.Error("Wanted")
	}
}

func TestRun(t *testing.T) {
	if err := run([]string{"sh", "-c", "exit 0"}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"sh", "-c", "echo '0:60: execution error: User canceled. (-128)' >&2; exit 1"}); !errors.Is(err, ErrCancelled) {
		t.Fatalf("cancel: %v", err)
	}
	if err := run([]string{"sh", "-c", "echo 'sysctl: unknown oid' >&2; exit 1"}); err == nil || !strings.Contains(err.Error(), "unknown oid") {
		t.Fatalf("failure: %v", err)
	}
}

// TestWantedMatchesTheEngine: the engine's own error when the weights do not fit a 24 GB Mac's
// default working set is one the app offers the raise for.
func TestWantedMatchesTheEngine(t *testing.T) {
	c := config.Production()
	m, err := decode.MemoryOf(c, 8)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Context(c, 0, decode.MacWorkingSet(24))
	if err == nil || !Wanted(err.Error()) {
		t.Fatalf("24 GB: %v", err)
	}
}
