package gpu

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
