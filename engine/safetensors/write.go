package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// WriteTensor is one tensor to write; Data holds its little-endian bytes.
type WriteTensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// WriteFile writes tensors and metadata to path atomically: a temp file in
// the same directory is fsynced and renamed over path, then the directory is
// fsynced, so readers see either the old file or the complete new one.
// An existing file that is still mapped stays valid: rename keeps its inode.
//
// Output is deterministic: tensors are sorted by name and laid out
// contiguously in that order (no padding, as other readers reject gaps), and
// the header is space-padded to a multiple of 8 bytes so the data section
// starts 8-byte aligned.
func WriteFile(path string, tensors []WriteTensor, metadata map[string]string) error {
	sorted := slices.Clone(tensors) // copies headers only, never Data
	slices.SortFunc(sorted, func(a, b WriteTensor) int { return strings.Compare(a.Name, b.Name) })
	header, err := encodeHeader(path, sorted, metadata)
	if err != nil {
		return err
	}

	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	tmp := f.Name()
	if err := writeTo(f, header, sorted); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("safetensors: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("safetensors: sync directory of %s: %w", path, err)
	}
	return nil
}

// writeTo writes the length prefix, header and data, then fsyncs and closes f.
func writeTo(f *os.File, header []byte, tensors []WriteTensor) error {
	// CreateTemp makes 0600 files; checkpoints are meant to be shared.
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20) // large Data slices bypass the buffer
	w.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(header))))
	w.Write(header)
	for _, t := range tensors {
		w.Write(t.Data)
	}
	if err := w.Flush(); err != nil { // bufio keeps the first write error
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// encodeHeader validates sorted tensors and builds the padded JSON header.
// It is written by hand so key order (metadata first, then tensors by name)
// is fixed and scalar shapes come out as [] rather than null.
func encodeHeader(path string, sorted []WriteTensor, metadata map[string]string) ([]byte, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: write %s: "+format, append([]any{path}, args...)...)
	}
	var h bytes.Buffer
	h.WriteByte('{')
	if len(metadata) > 0 {
		for k, v := range metadata {
			// json.Marshal would silently turn invalid UTF-8 into U+FFFD.
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, fail("metadata %q is not valid UTF-8", k)
			}
		}
		m, _ := json.Marshal(metadata) // sorts keys
		h.WriteString(`"__metadata__":`)
		h.Write(m)
	}
	var off uint64
	for i, t := range sorted {
		switch {
		case t.Name == "" || t.Name == "__metadata__" || !utf8.ValidString(t.Name):
			return nil, fail("invalid tensor name %q", t.Name)
		case i > 0 && sorted[i-1].Name == t.Name:
			return nil, fail("tensor %q given twice", t.Name)
		case t.DType.Size() == 0:
			return nil, fail("tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		want := uint64(t.DType.Size())
		for _, d := range t.Shape {
			if d < 0 {
				return nil, fail("tensor %q: shape %v has negative dimension %d", t.Name, t.Shape, d)
			}
			hi, lo := bits.Mul64(want, uint64(d))
			if hi != 0 {
				return nil, fail("tensor %q: shape %v overflows", t.Name, t.Shape)
			}
			want = lo
		}
		if uint64(len(t.Data)) != want {
			return nil, fail("tensor %q: %s shape %v needs %d bytes, Data has %d", t.Name, t.DType, t.Shape, want, len(t.Data))
		}

		if h.Len() > 1 {
			h.WriteByte(',')
		}
		name, _ := json.Marshal(t.Name)
		h.Write(name)
		h.WriteString(`:{"dtype":"` + string(t.DType) + `","shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				h.WriteByte(',')
			}
			h.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&h, `],"data_offsets":[%d,%d]}`, off, off+want)
		off += want
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	if h.Len() > maxHeader {
		return nil, fail("header is %d bytes, over the %d-byte limit", h.Len(), maxHeader)
	}
	return h.Bytes(), nil
}
