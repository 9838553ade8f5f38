package main

import (
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/gpu"
)

// applyMemoryDefaults sets --kv-bits, --prefill-chunk and --cache-mb (where the command has
// it: cacheMB nil otherwise) to gpu.DefaultsFor a Mac with mem bytes of memory where the user
// set none of them, on the metal backend (the others keep their own defaults: the cpu reference
// has no int8 cache, the emulator no chunk by memory).
func applyMemoryDefaults(flags interface{ Changed(string) bool }, backend string, mem int64, kvBits, prefillChunk, cacheMB *int) {
	if backend != "metal" {
		return
	}
	d := gpu.DefaultsFor(mem)
	if !flags.Changed("kv-bits") {
		*kvBits = d.KVBits
	}
	if !flags.Changed("prefill-chunk") {
		*prefillChunk = d.PrefillChunk
	}
	if cacheMB != nil && !flags.Changed("cache-mb") {
		*cacheMB = d.CacheMB
	}
}

// servedSizing is what lily serve holds for the production model on the metal backend with no
// --ctx or --parallel (gpu.Size) on device d, in a GPU working set of workingSet bytes, with
// kvBits, prefillChunk (-1: by memory) and a prefix cache of cacheMB. On an error (not one
// session fits) the sizing still holds the memory and prefill chunks.
func servedSizing(workingSet int64, kvBits, prefillChunk, cacheMB int, d gpu.Device) (gpu.Sizing, error) {
	chunks, auto := chunkOptions("metal", prefillChunk)
	o := gpu.GPUOptions{WorkingSet: workingSet, KVBits: kvBits, Chunks: chunks, AutoChunks: auto, CacheBytes: int64(cacheMB) << 20}
	return gpu.Size(config.Production(), o, d)
}

// macSizing is servedSizing on a Mac with memory bytes of memory, with its serving defaults
// (gpu.DefaultsFor), as serve picks them when --kv-bits, --prefill-chunk and --cache-mb are not
// given.
func macSizing(workingSet, memory int64, d gpu.Device) (gpu.Sizing, gpu.ServingDefaults, error) {
	def := gpu.DefaultsFor(memory)
	s, err := servedSizing(workingSet, def.KVBits, def.PrefillChunk, def.CacheMB, d)
	return s, def, err
}

// productionContext is the context lily serve would hold for the production model in a GPU
// working set of so many bytes on a Mac with memory bytes of memory (macSizing), and why
// (syscheck.ContextFunc).
func productionContext(workingSet, memory int64) (int, string, error) {
	s, _, err := macSizing(workingSet, memory, gpu.Device{})
	return s.Context, s.ContextWhy, err
}
