package main

import (
	"slices"

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

// servedContext is the context lily serve holds for the production model on the metal backend
// in a GPU working set of workingSet bytes, with kvBits and prefillChunk (-1: by memory), and the
// largest prefill chunk it runs; 0 positions when the weights do not fit, with why.
func servedContext(workingSet int64, kvBits, prefillChunk int) (positions, chunk int, why string, err error) {
	c := config.Production()
	chunks, auto := chunkOptions("metal", prefillChunk)
	mem, chunks, err := gpu.MemoryFor(c, gpu.GPUOptions{WorkingSet: workingSet, KVBits: kvBits, Chunks: chunks, AutoChunks: auto})
	if err != nil {
		return 0, 0, "", err
	}
	chunk = slices.Max(append([]int{0}, chunks...))
	positions, why, err = gpu.ServedContext(mem, c, gpu.GPUOptions{WorkingSet: workingSet})
	return positions, chunk, why, err
}
