// Package safetensors reads memory-mapped safetensors checkpoints (single file or sharded) and writes them atomically.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
//
//	{"name": {"dtype": "U32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}
//
// and then the data section; offsets are relative to the data section start.
// Tensor data is never copied: Tensor.Data slices the read-only mapping and is
// valid only until Checkpoint.Close.
package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strings"
	"unsafe"
)

// DType is a safetensors element type as spelled in the header.
type DType string

const (
	BF16 DType = "BF16"
	F16  DType = "F16"
	F32  DType = "F32"
	F64  DType = "F64"
	U8   DType = "U8"
	I8   DType = "I8"
	U16  DType = "U16"
	I16  DType = "I16"
	U32  DType = "U32"
	I32  DType = "I32"
	U64  DType = "U64"
	I64  DType = "I64"
	BOOL DType = "BOOL"
)

// Size returns the bytes per element, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case U8, I8, BOOL:
		return 1
	case BF16, F16, U16, I16:
		return 2
	case F32, U32, I32:
		return 4
	case F64, U64, I64:
		return 8
	}
	return 0
}

// maxHeader bounds the JSON header so a corrupt length cannot make us parse
// (or, when writing, produce) something absurd.
const maxHeader = 100 << 20

// Tensor is one named array inside a mapped file.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte // slice of the mmap'd file: never copied
	File  string // path of the shard holding it
	// Offset is the position of Data within File, so callers can wrap the
	// whole (page-aligned) mapping in a device buffer and address tensors.
	Offset int64
}

// NumElements returns the product of the shape (1 for a scalar).
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// The views below reinterpret Data in place. They assume a little-endian
// host (amd64, arm64) and tolerate unaligned data, which both architectures
// load fine and which Go permits for pointer-free element types.

// Uint32s views U32 data (e.g. packed 4-bit weights) without copying.
func (t *Tensor) Uint32s() []uint32 {
	t.mustBe("Uint32s", U32)
	return view[uint32](t.Data)
}

// Uint16s views BF16, F16 or U16 data as raw 16-bit words without copying.
func (t *Tensor) Uint16s() []uint16 {
	t.mustBe("Uint16s", BF16, F16, U16)
	return view[uint16](t.Data)
}

// Float32s views F32 data without copying.
func (t *Tensor) Float32s() []float32 {
	t.mustBe("Float32s", F32)
	return view[float32](t.Data)
}

func (t *Tensor) mustBe(method string, ok ...DType) {
	if !slices.Contains(ok, t.DType) {
		panic(fmt.Sprintf("safetensors: %s on tensor %q of dtype %s (want %v)", method, t.Name, t.DType, ok))
	}
}

func view[T uint16 | uint32 | float32](b []byte) []T {
	n := len(b) / int(unsafe.Sizeof(T(0)))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// Checkpoint is a set of mapped files whose tensors share one namespace.
type Checkpoint struct {
	tensors map[string]*Tensor
	names   []string
	meta    map[string]string
	maps    [][]byte
}

// OpenFile maps and validates one .safetensors file.
func OpenFile(path string) (*Checkpoint, error) {
	c := &Checkpoint{meta: map[string]string{}}
	ts, err := c.add(path)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.tensors = ts
	c.finish()
	return c, nil
}

// add maps and parses one file, merging its metadata into c (later files
// override earlier keys). The caller merges the returned tensors.
func (c *Checkpoint) add(path string) (map[string]*Tensor, error) {
	buf, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	c.maps = append(c.maps, buf)
	ts, meta, err := parse(path, buf)
	if err != nil {
		return nil, err
	}
	maps.Copy(c.meta, meta)
	return ts, nil
}

func (c *Checkpoint) finish() {
	c.names = slices.Sorted(maps.Keys(c.tensors))
}

// Tensor returns the named tensor. Its Data is valid until Close.
func (c *Checkpoint) Tensor(name string) (*Tensor, bool) {
	t, ok := c.tensors[name]
	return t, ok
}

// Names returns all tensor names, sorted.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Metadata returns a copy of the merged __metadata__ of all files.
func (c *Checkpoint) Metadata() map[string]string { return maps.Clone(c.meta) }

// Close unmaps every file. Tensor data must not be used afterwards; calling
// Close again is a no-op.
func (c *Checkpoint) Close() error {
	var first error
	for _, b := range c.maps {
		if err := unmap(b); err != nil && first == nil {
			first = err
		}
	}
	c.maps, c.tensors, c.names = nil, nil, nil
	return first
}

// entry is one tensor's header record. Offsets stay raw so that malformed
// values get a specific message rather than a generic decode error.
type entry struct {
	DType       DType           `json:"dtype"`
	Shape       []int64         `json:"shape"`
	DataOffsets json.RawMessage `json:"data_offsets"`
}

// parse validates the header and layout of one mapped file.
func parse(path string, buf []byte) (map[string]*Tensor, map[string]string, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: %s: "+format, append([]any{path}, args...)...)
	}
	if len(buf) < 8 {
		return nil, nil, fail("file is %d bytes, shorter than the 8-byte header length", len(buf))
	}
	n := binary.LittleEndian.Uint64(buf)
	switch {
	case n == 0:
		return nil, nil, fail("header length is 0")
	case n > maxHeader:
		return nil, nil, fail("header length %d exceeds the %d-byte limit", n, maxHeader)
	case n > uint64(len(buf)-8):
		return nil, nil, fail("header length %d runs past end of file (%d bytes after the length prefix)", n, len(buf)-8)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(buf[8:8+n], &raw); err != nil {
		return nil, nil, fail("header is not valid JSON: %v", err)
	}

	var meta map[string]string
	if m, ok := raw["__metadata__"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, nil, fail("__metadata__ must map strings to strings: %v", err)
		}
		delete(raw, "__metadata__")
	}

	data := buf[8+n:]
	tensors := make(map[string]*Tensor, len(raw))
	type span struct {
		name       string
		begin, end uint64
	}
	spans := make([]span, 0, len(raw))
	for name, msg := range raw {
		var e entry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, nil, fail("tensor %q: bad header entry: %v", name, err)
		}
		size := e.DType.Size()
		if size == 0 {
			return nil, nil, fail("tensor %q: unknown dtype %q", name, e.DType)
		}
		if e.Shape == nil {
			return nil, nil, fail("tensor %q: missing shape", name)
		}
		shape := make([]int, len(e.Shape))
		numel := uint64(1)
		for i, d := range e.Shape {
			if d < 0 {
				return nil, nil, fail("tensor %q: shape %v has negative dimension %d", name, e.Shape, d)
			}
			hi, lo := bits.Mul64(numel, uint64(d))
			if hi != 0 || int64(lo) < 0 {
				return nil, nil, fail("tensor %q: shape %v overflows", name, e.Shape)
			}
			numel, shape[i] = lo, int(d)
		}
		var off []uint64
		if err := json.Unmarshal(e.DataOffsets, &off); err != nil || len(off) != 2 {
			return nil, nil, fail("tensor %q: data_offsets must be two non-negative integers, found %s", name, orNone(e.DataOffsets))
		}
		begin, end := off[0], off[1]
		if begin > end {
			return nil, nil, fail("tensor %q: data_offsets begin %d > end %d", name, begin, end)
		}
		if end > uint64(len(data)) {
			return nil, nil, fail("tensor %q: data_offsets end %d is past the %d-byte data section (file %d bytes, truncated?)",
				name, end, len(data), len(buf))
		}
		if hi, want := bits.Mul64(numel, uint64(size)); hi != 0 || want != end-begin {
			return nil, nil, fail("tensor %q: %s shape %v needs %d bytes, data_offsets [%d, %d] span %d",
				name, e.DType, shape, want, begin, end, end-begin)
		}
		tensors[name] = &Tensor{
			Name:   name,
			DType:  e.DType,
			Shape:  shape,
			Data:   data[begin:end:end], // capped so append can never reach a neighbour
			File:   path,
			Offset: int64(8 + n + begin),
		}
		spans = append(spans, span{name, begin, end})
	}

	// Sort by start and compare with the furthest end seen; empty tensors
	// occupy no bytes and cannot overlap anything.
	slices.SortFunc(spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), strings.Compare(a.name, b.name))
	})
	var last *span
	for i := range spans {
		s := &spans[i]
		if s.begin == s.end {
			continue
		}
		if last != nil && s.begin < last.end {
			return nil, nil, fail("tensors %q [%d, %d] and %q [%d, %d] overlap",
				last.name, last.begin, last.end, s.name, s.begin, s.end)
		}
		last = s // no overlap, so s ends at or after every earlier span
	}
	return tensors, meta, nil
}

func orNone(b json.RawMessage) string {
	if len(bytes.TrimSpace(b)) == 0 {
		return "nothing"
	}
	return string(b)
}
