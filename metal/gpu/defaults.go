package gpu

import (
	"fmt"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/internal/wiredlimit"
)

// SmallMac is the memory below which serving favours context over speed: Macs of 24 GB (Apple's
// "32 GB" is 32 GiB of hw.memsize, so a 32 GB Mac is not small).
const SmallMac = 32 << 30

// ServingDefaults are the metal backend's KV cache format and largest prefill chunk where the
// user sets neither (--kv-bits, --prefill-chunk).
type ServingDefaults struct {
	KVBits       int // 16 or 8
	PrefillChunk int // the largest prefill chunk; -1: DefaultChunks picks it by memory
	CacheMB      int // the prefix cache's host memory (lily serve --cache-mb)
}

// DefaultsFor is the one place that decides ServingDefaults, from the Mac's total memory in bytes
// (hw.memsize; 0: unknown, taken as large). Below SmallMac the weights leave little of the GPU's
// working set even after raising iogpu.wired_limit_mb, so context comes first: the int8 KV cache
// (10,880 bytes per position instead of 20,480: about twice the context) and the 512-token
// prefill chunk (76 MB of activations where the 4,096-token chunk takes 562 MB: in a 20 GiB
// working set, 117,760 positions instead of 73,216). The 64-token chunk would add only about
// 5,600 positions more (5%) but prefill at about 60% of the 512-token chunk's modelled rate
// (bench --plan --prefill). The prefix cache's snapshots live outside the GPU's limit, in what
// the raised limit leaves macOS (4 GiB): 1 GiB of them there, 4 GiB on larger Macs. Larger Macs
// keep the bfloat16 cache and the chunk chosen by memory.
func DefaultsFor(totalMemory int64) ServingDefaults {
	if totalMemory > 0 && totalMemory < SmallMac {
		return ServingDefaults{KVBits: 8, PrefillChunk: ChunkMedium, CacheMB: 1024}
	}
	return ServingDefaults{KVBits: 16, PrefillChunk: -1, CacheMB: 4096}
}

// visionShare is the share of a small Mac's context beyond which lily serve's --vision auto
// leaves the vision tower out: a quarter.
const visionShare = 4

// AutoVision is lily serve's --vision auto for model c served with o on a Mac of totalMemory
// bytes (hw.memsize; 0: unknown, taken as large): on, except where the Mac is small (DefaultsFor)
// and the tower (Sizing.Vision) would take more than a quarter of the positions a session holds
// there; off then, with why. A small Mac is judged in the working set the suggested
// iogpu.wired_limit_mb gives (wiredlimit.SuggestedMB): in macOS's default one it holds no session
// either way, and lily doctor gives the raise.
//
// With the production model, its 24 GB defaults and the 2,621,440-pixel cap, the tower holds
// 1.45 GB (0.89 GB of weights, 0.56 GB of activations for 10,240 patches), the memory of 133,486
// int8 positions: more than the 104,448 a 24 GB Mac holds after the raise, so with it not one
// session fits there, and auto leaves it out. A 32 GB Mac is not small and keeps it: in macOS's
// default working set its context goes from 125,184 positions (3 sequences) to 61,440 (1); after
// the raise it keeps all 262,144.
func AutoVision(c *config.Config, o GPUOptions, totalMemory int64) (on bool, why string) {
	if c.Vision == nil || totalMemory <= 0 || totalMemory >= SmallMac {
		return true, ""
	}
	tower, err := towerMemory(c, o.ImagePixels)
	if err != nil || tower.Total(towerCacheSize) == 0 {
		return true, "" // no tower the GPU runs: nothing to leave out for the context
	}
	mb := wiredlimit.SuggestedMB(uint64(totalMemory))
	o.WorkingSet, o.PrefillRoute = int64(mb)<<20, RouteChoice{}
	text := *c
	text.Vision = nil
	off, err := Size(&text, o, Device{})
	if err != nil || off.Context == 0 {
		return true, "" // nothing to keep for the context: serve's own sizing says why
	}
	with, err := Size(c, o, Device{})
	if err != nil {
		with.Context = 0 // the tower leaves no room for the sessions asked for
	}
	cost := off.Context - with.Context
	if cost*visionShare <= off.Context {
		return true, ""
	}
	head := fmt.Sprintf("vision is off on this %s Mac (iogpu.wired_limit_mb=%d): ", wiredlimit.GB(uint64(totalMemory)), mb)
	tail := "; lily serve --vision on to use it"
	if with.Context == 0 {
		return false, fmt.Sprintf("%sbeside the vision tower (%s) no session fits, where %d positions do without it%s", head, gibOf(tower.Total(towerCacheSize)), off.Context, tail)
	}
	return false, fmt.Sprintf("%sthe vision tower (%s) would take %d of its %d positions%s", head, gibOf(tower.Total(towerCacheSize)), cost, off.Context, tail)
}
