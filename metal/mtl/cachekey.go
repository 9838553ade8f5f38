package mtl

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
	"sort"
	"strconv"
)

// cacheKeyVersion changes whenever what the key covers, or how archives are built, changes.
const cacheKeyVersion = "lily-mtl-pipeline-v1"

// CacheKey names the binary archive of one compute pipeline: a SHA-256 over everything that
// changes its machine code — the source, the compile options, the function and its constant
// values, the GPU, and the OS build (a macOS update ships a new Metal compiler and may
// invalidate archives). Macro and constant order do not matter.
func CacheKey(source string, opts CompileOptions, function string, consts *FunctionConstants, device, osVersion string) string {
	return pipelineKey(sourceDigest(source, opts), function, consts, device, osVersion)
}

// sourceDigest covers what a Library was compiled from; libraries keep it so pipelines do not
// rehash the source for every kernel.
func sourceDigest(source string, opts CompileOptions) [32]byte {
	h := sha256.New()
	field(h, cacheKeyVersion)
	field(h, source)
	field(h, strconv.FormatUint(uint64(opts.LanguageVersion), 10))
	field(h, strconv.Itoa(int(opts.Math)))
	keys := make([]string, 0, len(opts.Macros))
	for k := range opts.Macros {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	field(h, strconv.Itoa(len(keys)))
	for _, k := range keys {
		field(h, k)
		field(h, opts.Macros[k])
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

func pipelineKey(src [32]byte, function string, consts *FunctionConstants, device, osVersion string) string {
	h := sha256.New()
	h.Write(src[:])
	field(h, function)
	field(h, strconv.Itoa(consts.Len()))
	if consts != nil {
		for _, c := range consts.vals {
			field(h, strconv.Itoa(c.index)+":"+strconv.FormatUint(uint64(c.typ), 10)+":"+strconv.FormatUint(uint64(c.bits), 10))
		}
	}
	field(h, device)
	field(h, osVersion)
	return hex.EncodeToString(h.Sum(nil))
}

// field writes s length-prefixed, so no two different field lists hash the same bytes.
func field(h hash.Hash, s string) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	io.WriteString(h, s)
}
