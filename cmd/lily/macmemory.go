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

// served is lily serve's sizing of the production model (gpu.Size) and, where --vision auto
// leaves the vision tower out (its memory then not counted), why.
type served struct {
	gpu.Sizing
	VisionOff string
}

// servedSizing is what lily serve holds for the production model on the metal backend with no
// --ctx, --parallel or --vision (gpu.Size) on device d, in a GPU working set of workingSet bytes,
// with kvBits, prefillChunk (-1: by memory) and a prefix cache of cacheMB, on a Mac of memory
// bytes (0: unknown), whose --vision auto decides whether the tower counts (visionOff). On an
// error (not one session fits) the sizing still holds the memory, prefill chunks and tower.
func servedSizing(workingSet, memory int64, kvBits, prefillChunk, cacheMB int, d gpu.Device) (served, error) {
	o := backendOptions{kvBits: kvBits, prefillChunk: prefillChunk, cacheBytes: int64(cacheMB) << 20}
	c := config.Production()
	s := served{VisionOff: visionOff("metal", o, c, memory)}
	if s.VisionOff != "" {
		c.Vision = nil
	}
	g := o.gpuOptions("metal")
	g.WorkingSet = workingSet
	var err error
	s.Sizing, err = gpu.Size(c, g, d)
	return s, err
}

// macSizing is servedSizing on a Mac with memory bytes of memory, with its serving defaults
// (gpu.DefaultsFor), as serve picks them when --kv-bits, --prefill-chunk and --cache-mb are not
// given.
func macSizing(workingSet, memory int64, d gpu.Device) (served, gpu.ServingDefaults, error) {
	def := gpu.DefaultsFor(memory)
	s, err := servedSizing(workingSet, memory, def.KVBits, def.PrefillChunk, def.CacheMB, d)
	return s, def, err
}

// productionContext is the context lily serve would hold for the production model in a GPU
// working set of so many bytes on a Mac with memory bytes of memory (macSizing), and why
// (syscheck.ContextFunc).
func productionContext(workingSet, memory int64) (int, string, error) {
	s, _, err := macSizing(workingSet, memory, gpu.Device{})
	return s.Context, s.ContextWhy, err
}
