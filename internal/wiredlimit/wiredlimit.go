// Package wiredlimit is the one place that decides how far Lily suggests raising macOS's GPU
// wired-memory limit (the sysctl iogpu.wired_limit_mb) and how that is said: `lily doctor`,
// `lily bench --plan` and the menu-bar app all use it.
//
// macOS lets the GPU wire about two thirds of a 24 or 32 GB Mac's memory by default
// (MTLDevice.recommendedMaxWorkingSetSize): 16 GB of 24, less than the model's 18.2 GiB of
// weights. An administrator can raise the limit with `sudo sysctl iogpu.wired_limit_mb=N`; Metal
// then reports N MiB as the working set. The setting lasts until the Mac restarts.
package wiredlimit

import (
	"fmt"
	"strings"
)

// LeaveMacOS is what the suggested limit leaves macOS and every other process: 4 GiB.
//
// Why 4 GiB: the limit is a ceiling on what the GPU may wire, but Lily sizes its KV cache to
// fill the working set, so on a 24 GB Mac Lily does wire up to it. What is left must hold the
// kernel and WindowServer (about 2 GiB wired on a fresh login), Lily's own CPU-side memory (the
// Go heap, the tokenizer, request buffers, prefix-cache snapshots), and a terminal or editor.
// 3 GiB is the floor below which macOS compresses and swaps as soon as a browser opens, and
// under memory pressure with most memory wired a Mac can panic rather than fail an allocation;
// 4 GiB keeps a margin above that floor while still giving a 24 GB Mac about 109,000
// positions with the int8 KV cache (the product promises at least 65,536 there). The same
// amount, not a share, is left on larger Macs: macOS's own need does not grow with the memory.
const LeaveMacOS = 4 << 30

// SuggestedMB is the iogpu.wired_limit_mb value suggested for a Mac with memBytes of memory
// (hw.memsize): all of it but LeaveMacOS, in MiB; 0 when memBytes is unknown or too small.
func SuggestedMB(memBytes uint64) uint64 {
	if memBytes <= 2*LeaveMacOS {
		return 0
	}
	return (memBytes - LeaveMacOS) >> 20
}

// Command is the shell command that sets the limit to mb MiB.
func Command(mb uint64) string { return fmt.Sprintf("sudo sysctl iogpu.wired_limit_mb=%d", mb) }

// GB renders bytes the way Apple sells memory: binary units named GB ("24 GB", "20.5 GB").
func GB(b uint64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(b)/(1<<30)), ".0") + " GB"
}

// Effect says plainly what setting the limit to mb MiB does on a Mac with memBytes of memory:
// what the GPU may then use, what it leaves macOS, and that it lasts until the Mac restarts.
func Effect(mb, memBytes uint64) string {
	return fmt.Sprintf("lets the GPU use up to %s of this Mac's %s and leaves macOS %s; it lasts until the Mac restarts (run it again after each restart)",
		GB(mb<<20), GB(memBytes), GB(memBytes-min(memBytes, mb<<20)))
}

// Advice is one line for a Mac with memBytes of memory: the exact command and its Effect; ""
// when no raise is suggested there.
func Advice(memBytes uint64) string {
	mb := SuggestedMB(memBytes)
	if mb == 0 {
		return ""
	}
	return Command(mb) + " " + Effect(mb, memBytes)
}
