package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

func u32s(v ...uint32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

func u16s(v ...uint16) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint16(b, x)
	}
	return b
}

func f32s(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// sample has a 1-byte tensor sorting first, so every later tensor lands at
// an odd offset and the views are exercised on unaligned data.
func sample() []WriteTensor {
	return []WriteTensor{
		{Name: "norm", DType: F32, Shape: []int{2}, Data: f32s(1.5, -2)},
		{Name: "layers.0.mlp.weight", DType: U32, Shape: []int{2, 3}, Data: u32s(0, 1, 2, 3, 4, 0xdeadbeef)},
		{Name: "layers.0.mlp.scales", DType: BF16, Shape: []int{3}, Data: u16s(0x3f80, 0x4000, 0xbf80)},
		{Name: "flag", DType: BOOL, Shape: []int{}, Data: []byte{1}},
		{Name: "empty", DType: I8, Shape: []int{0, 4}, Data: nil},
	}
}

func mustWrite(t *testing.T, path string, ts []WriteTensor, meta map[string]string) {
	t.Helper()
	if err := WriteFile(path, ts, meta); err != nil {
		t.Fatal(err)
	}
}

// mapped reports whether path appears in this process's memory maps; it
// proves data is served from the mapping and that Close unmaps it.
func mapped(t *testing.T, path string) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps")
	}
	return bytes.Contains(maps, []byte(" "+path+"\n"))
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

func TestDTypeSize(t *testing.T) {
	for d, want := range map[DType]int{
		BF16: 2, F16: 2, F32: 4, F64: 8, U8: 1, I8: 1, U16: 2, I16: 2,
		U32: 4, I32: 4, U64: 8, I64: 8, BOOL: 1, "Q4": 0, "": 0,
	} {
		if got := d.Size(); got != want {
			t.Errorf("%q.Size() = %d, want %d", d, got, want)
		}
	}
}

func TestRoundTripFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	in := sample()
	meta := map[string]string{"format": "mlx", "quant": "4bit"}
	mustWrite(t, path, in, meta)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	c, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"empty", "flag", "layers.0.mlp.scales", "layers.0.mlp.weight", "norm"}; !slices.Equal(c.Names(), want) {
		t.Fatalf("Names() = %v, want %v", c.Names(), want)
	}
	if got := c.Metadata(); len(got) != 2 || got["format"] != "mlx" || got["quant"] != "4bit" {
		t.Errorf("Metadata() = %v, want %v", got, meta)
	}
	c.Metadata()["format"] = "changed"
	if c.Metadata()["format"] != "mlx" {
		t.Error("Metadata() exposes internal map")
	}

	region := c.maps[0]
	lo, hi := uintptr(unsafe.Pointer(&region[0])), uintptr(unsafe.Pointer(&region[0]))+uintptr(len(region))
	for _, w := range in {
		g, ok := c.Tensor(w.Name)
		if !ok {
			t.Fatalf("tensor %q missing", w.Name)
		}
		if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) || g.File != path {
			t.Errorf("%q = {%s %v %x %s}, want {%s %v %x %s}", w.Name, g.DType, g.Shape, g.Data, g.File, w.DType, w.Shape, w.Data, path)
		}
		if !bytes.Equal(raw[g.Offset:g.Offset+int64(len(g.Data))], w.Data) {
			t.Errorf("%q: Offset %d does not locate its data in the file", w.Name, g.Offset)
		}
		if cap(g.Data) != len(g.Data) {
			t.Errorf("%q: cap %d > len %d lets append overwrite a neighbour", w.Name, cap(g.Data), len(g.Data))
		}
		if len(g.Data) > 0 {
			if p := uintptr(unsafe.Pointer(&g.Data[0])); p < lo || p >= hi {
				t.Errorf("%q: Data at %#x is outside the mapping [%#x, %#x)", w.Name, p, lo, hi)
			}
		}
	}

	w, _ := c.Tensor("layers.0.mlp.weight")
	if got := w.Uint32s(); !slices.Equal(got, []uint32{0, 1, 2, 3, 4, 0xdeadbeef}) || w.NumElements() != 6 {
		t.Errorf("Uint32s() = %#x, NumElements() = %d", got, w.NumElements())
	}
	s, _ := c.Tensor("layers.0.mlp.scales")
	if got := s.Uint16s(); !slices.Equal(got, []uint16{0x3f80, 0x4000, 0xbf80}) {
		t.Errorf("Uint16s() = %#x", got)
	}
	n, _ := c.Tensor("norm")
	if got := n.Float32s(); !slices.Equal(got, []float32{1.5, -2}) {
		t.Errorf("Float32s() = %v", got)
	}
	if f, _ := c.Tensor("flag"); f.NumElements() != 1 {
		t.Errorf("scalar NumElements() = %d, want 1", f.NumElements())
	}
	if e, _ := c.Tensor("empty"); e.NumElements() != 0 || len(e.Data) != 0 {
		t.Errorf("empty tensor: NumElements() = %d, len(Data) = %d", e.NumElements(), len(e.Data))
	}

	if !mapped(t, path) {
		t.Error("file is not memory-mapped while open")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if mapped(t, path) {
		t.Error("file still mapped after Close")
	}
	if _, ok := c.Tensor("norm"); ok {
		t.Error("Tensor() still answers after Close")
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestViewWrongDTypePanics(t *testing.T) {
	tn := &Tensor{Name: "scales", DType: BF16, Shape: []int{2}, Data: make([]byte, 4)}
	for name, f := range map[string]func(){
		"Uint32s":  func() { tn.Uint32s() },
		"Float32s": func() { tn.Float32s() },
	} {
		func() {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, name) || !strings.Contains(msg, `"scales"`) || !strings.Contains(msg, "BF16") {
					t.Errorf("%s on BF16: panic %q, want one naming the method, tensor and dtype", name, msg)
				}
			}()
			f()
		}()
	}
}

func TestWriteFileDeterministic(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	in := sample()
	mustWrite(t, a, in, map[string]string{"x": "1", "y": "2"})
	slices.Reverse(in)
	mustWrite(t, b, in, map[string]string{"y": "2", "x": "1"})
	ba, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ba, bb) {
		t.Fatal("same tensors in a different order produced different files")
	}

	n := binary.LittleEndian.Uint64(ba)
	if n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	var hdr map[string]struct {
		Off [2]int `json:"data_offsets"`
	}
	if err := json.Unmarshal(ba[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	delete(hdr, "__metadata__")
	end := 0
	for _, name := range []string{"empty", "flag", "layers.0.mlp.scales", "layers.0.mlp.weight", "norm"} {
		if hdr[name].Off[0] != end {
			t.Errorf("%q starts at %d, want %d (sorted, contiguous)", name, hdr[name].Off[0], end)
		}
		end = hdr[name].Off[1]
	}
	if int(8+n)+end != len(ba) {
		t.Errorf("file is %d bytes, want %d", len(ba), int(8+n)+end)
	}

	fi, err := os.Stat(a)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v; want 0644", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("directory holds %d entries, want 2 (temp file left behind?)", len(ents))
	}
}

func TestWriteFileRejectsBadInput(t *testing.T) {
	cases := []struct {
		name  string
		in    []WriteTensor
		parts []string
	}{
		{"length", []WriteTensor{{Name: "w", DType: U32, Shape: []int{2, 3}, Data: make([]byte, 20)}}, []string{`"w"`, "needs 24 bytes", "Data has 20"}},
		{"dtype", []WriteTensor{{Name: "w", DType: "Q4", Shape: []int{1}, Data: []byte{0}}}, []string{`"w"`, `"Q4"`}},
		{"negative", []WriteTensor{{Name: "w", DType: U8, Shape: []int{2, -1}}}, []string{`"w"`, "-1"}},
		{"duplicate", []WriteTensor{{Name: "w", DType: U8, Shape: []int{1}, Data: []byte{0}}, {Name: "w", DType: U8, Shape: []int{1}, Data: []byte{1}}}, []string{`"w"`, "twice"}},
		{"reserved", []WriteTensor{{Name: "__metadata__", DType: U8, Shape: []int{}, Data: []byte{0}}}, []string{`"__metadata__"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "m.safetensors")
			mustWrite(t, path, sample(), nil)
			before, _ := os.ReadFile(path)
			wantErr(t, WriteFile(path, tc.in, nil), append(tc.parts, path)...)
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Error("failed write changed the existing file")
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("directory holds %d entries, want 1", len(ents))
			}
		})
	}
}

// A rewrite must not disturb a checkpoint that still maps the old file.
func TestWriteFileReplacesMappedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	mustWrite(t, path, []WriteTensor{{Name: "w", DType: U32, Shape: []int{1}, Data: u32s(7)}}, nil)
	old, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	mustWrite(t, path, []WriteTensor{{Name: "w", DType: U32, Shape: []int{1}, Data: u32s(9)}}, nil)
	c, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ow, _ := old.Tensor("w")
	nw, _ := c.Tensor("w")
	if ow.Uint32s()[0] != 7 || nw.Uint32s()[0] != 9 {
		t.Errorf("old mapping reads %d (want 7), new file reads %d (want 9)", ow.Uint32s()[0], nw.Uint32s()[0])
	}
}

func TestOpenDirSingleFile(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "model.safetensors"), sample(), nil)
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Names()) != len(sample()) {
		t.Errorf("Names() = %v", c.Names())
	}
}

func TestOpenDirEmpty(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenDir(dir)
	wantErr(t, err, dir, "model.safetensors.index.json", "model.safetensors ")
}

// shardDir writes three shards and returns the directory plus the shard
// names; the caller writes the index.
func shardDir(t *testing.T) (string, []string) {
	dir := t.TempDir()
	names := []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
	mustWrite(t, filepath.Join(dir, names[0]), []WriteTensor{
		{Name: "a", DType: F32, Shape: []int{2}, Data: f32s(1, 2)},
		{Name: "b", DType: U32, Shape: []int{3}, Data: u32s(3, 4, 5)},
	}, map[string]string{"format": "mlx"})
	mustWrite(t, filepath.Join(dir, names[1]), []WriteTensor{
		{Name: "c", DType: BF16, Shape: []int{4}, Data: u16s(6, 7, 8, 9)},
	}, map[string]string{"shard": "2"})
	mustWrite(t, filepath.Join(dir, names[2]), []WriteTensor{
		{Name: "d", DType: I8, Shape: []int{5}, Data: []byte{1, 2, 3, 4, 5}},
		{Name: "e", DType: U8, Shape: []int{}, Data: []byte{6}},
	}, nil)
	return dir, names
}

func writeIndex(t *testing.T, dir string, weightMap map[string]string) {
	t.Helper()
	js, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 42}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
}

func goodIndex(names []string) map[string]string {
	return map[string]string{"a": names[0], "b": names[0], "c": names[1], "d": names[2], "e": names[2]}
}

func TestOpenDirSharded(t *testing.T) {
	dir, names := shardDir(t)
	writeIndex(t, dir, goodIndex(names))
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Names(); !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
		t.Errorf("Names() = %v", got)
	}
	if got := c.Metadata(); len(got) != 2 || got["format"] != "mlx" || got["shard"] != "2" {
		t.Errorf("Metadata() = %v, want format=mlx shard=2", got)
	}
	for name, shard := range goodIndex(names) {
		if tn, ok := c.Tensor(name); !ok || tn.File != filepath.Join(dir, shard) {
			t.Errorf("tensor %q: found %v in %v, want %s", name, ok, tn, shard)
		}
	}
	b, _ := c.Tensor("b")
	cc, _ := c.Tensor("c")
	d, _ := c.Tensor("d")
	if !slices.Equal(b.Uint32s(), []uint32{3, 4, 5}) || !slices.Equal(cc.Uint16s(), []uint16{6, 7, 8, 9}) || !bytes.Equal(d.Data, []byte{1, 2, 3, 4, 5}) {
		t.Errorf("data: b=%v c=%v d=%v", b.Uint32s(), cc.Uint16s(), d.Data)
	}
	for _, n := range names {
		if !mapped(t, filepath.Join(dir, n)) {
			t.Errorf("%s not mapped", n)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if mapped(t, filepath.Join(dir, n)) {
			t.Errorf("%s still mapped after Close", n)
		}
	}
}

// rawFile writes a hand-made file: length prefix, header, then data zeros.
func rawFile(t *testing.T, prefix uint64, header string, data int) string {
	path := filepath.Join(t.TempDir(), "bad.safetensors")
	b := binary.LittleEndian.AppendUint64(nil, prefix)
	b = append(append(b, header...), make([]byte, data)...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func hdrFile(t *testing.T, header string, data int) string {
	return rawFile(t, uint64(len(header)), header, data)
}

func TestOpenFileRejectsBadFiles(t *testing.T) {
	cases := []struct {
		name  string
		make  func(t *testing.T) string
		parts []string
	}{
		{"short", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "bad.safetensors")
			os.WriteFile(p, []byte{1, 2, 3}, 0o644)
			return p
		}, []string{"3 bytes", "8-byte"}},
		{"empty", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "bad.safetensors")
			os.WriteFile(p, nil, 0o644)
			return p
		}, []string{"0 bytes"}},
		{"header zero", func(t *testing.T) string { return rawFile(t, 0, "{}", 0) }, []string{"header length is 0"}},
		{"header huge", func(t *testing.T) string { return rawFile(t, 200<<20, "{}", 0) }, []string{"209715200", "104857600"}},
		{"header past EOF", func(t *testing.T) string { return rawFile(t, 100, "{}", 8) }, []string{"header length 100", "10 bytes"}},
		{"bad JSON", func(t *testing.T) string { return hdrFile(t, `{"w": `, 0) }, []string{"not valid JSON", "unexpected end of JSON input"}},
		{"unknown dtype", func(t *testing.T) string {
			return hdrFile(t, `{"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}`, 1)
		}, []string{`"w"`, `unknown dtype "Q4"`}},
		{"negative dim", func(t *testing.T) string {
			return hdrFile(t, `{"w":{"dtype":"U8","shape":[2,-3],"data_offsets":[0,0]}}`, 0)
		}, []string{`"w"`, "negative dimension -3"}},
		{"missing shape", func(t *testing.T) string {
			return hdrFile(t, `{"w":{"dtype":"U8","data_offsets":[0,0]}}`, 0)
		}, []string{`"w"`, "missing shape"}},
		{"one offset", func(t *testing.T) string {
			return hdrFile(t, `{"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}}`, 1)
		}, []string{`"w"`, "two non-negative integers", "found [0]"}},
		{"string offsets", func(t *testing.T) string {
			return hdrFile(t, `{"w":{"dtype":"U8","shape":[1],"data_offsets":["0","1"]}}`, 1)
		}, []string{`"w"`, `found ["0","1"]`}},
		{"no offsets", func(t *testing.T) string {
			return hdrFile(t, `{"w":{"dtype":"U8","shape":[1]}}`, 1)
		}, []string{`"w"`, "found nothing"}},
		{"begin after end", func(t *testing.T) string {
			return hdrFile(t, `{"w":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}}`, 8)
		}, []string{`"w"`, "begin 8 > end 4"}},
		{"truncated", func(t *testing.T) string {
			// A good file (norm is last: 8 bytes ending the file) cut by 5 bytes.
			p := filepath.Join(t.TempDir(), "bad.safetensors")
			mustWrite(t, p, sample(), nil)
			fi, _ := os.Stat(p)
			os.Truncate(p, fi.Size()-5)
			return p
		}, []string{`"norm"`, "end 39", "34-byte data section", "truncated?"}},
		{"size mismatch", func(t *testing.T) string {
			return hdrFile(t, `{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}`, 12)
		}, []string{`"w"`, "F32", "[2 2]", "needs 16 bytes", "span 12"}},
		{"overlap", func(t *testing.T) string {
			return hdrFile(t, `{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}`, 12)
		}, []string{`"a" [0, 8]`, `"b" [4, 12]`, "overlap"}},
		{"bad metadata", func(t *testing.T) string { return hdrFile(t, `{"__metadata__":{"n":1}}`, 0) }, []string{"__metadata__", "strings"}},
		{"corrupt length prefix", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "bad.safetensors")
			mustWrite(t, p, sample(), nil)
			b, _ := os.ReadFile(p)
			b[0] -= 8 // padding is at most 7 spaces, so this cuts the closing brace
			os.WriteFile(p, b, 0o644)
			return p
		}, []string{"not valid JSON"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.make(t)
			c, err := OpenFile(path)
			wantErr(t, err, append(tc.parts, path)...)
			if c != nil {
				t.Error("got a checkpoint along with the error")
			}
			if mapped(t, path) {
				t.Error("file left mapped after a failed open")
			}
		})
	}
}

func TestOpenFileAllowsAdjacentAndEmptyTensors(t *testing.T) {
	// Empty tensors occupy no bytes, so sharing an offset is not an overlap.
	path := hdrFile(t, `{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"z":{"dtype":"U8","shape":[0],"data_offsets":[2,2]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 8)
	c, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestOpenDirRejectsBadIndex(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string, names []string) // writes the index
		parts func(dir string, names []string) []string
	}{
		{"bad JSON", func(t *testing.T, dir string, _ []string) {
			os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map": `), 0o644)
		}, func(string, []string) []string { return []string{"not valid JSON", "unexpected end of JSON input"} }},
		{"no weight_map", func(t *testing.T, dir string, _ []string) {
			os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"metadata":{}}`), 0o644)
		}, func(string, []string) []string { return []string{"missing or empty weight_map"} }},
		{"empty weight_map", func(t *testing.T, dir string, _ []string) {
			writeIndex(t, dir, map[string]string{})
		}, func(string, []string) []string { return []string{"missing or empty weight_map"} }},
		{"missing shard", func(t *testing.T, dir string, names []string) {
			m := goodIndex(names)
			m["e"] = "model-00004-of-00003.safetensors"
			writeIndex(t, dir, m)
		}, func(dir string, _ []string) []string {
			return []string{filepath.Join(dir, "model-00004-of-00003.safetensors"), `"e"`, "does not exist"}
		}},
		{"tensor not in shard", func(t *testing.T, dir string, names []string) {
			m := goodIndex(names)
			m["ghost"] = names[1]
			writeIndex(t, dir, m)
		}, func(dir string, names []string) []string {
			return []string{`"ghost"`, filepath.Join(dir, names[1]), "does not contain"}
		}},
		{"tensor not in index", func(t *testing.T, dir string, names []string) {
			m := goodIndex(names)
			delete(m, "d")
			writeIndex(t, dir, m)
		}, func(dir string, names []string) []string {
			return []string{`"d"`, filepath.Join(dir, names[2]), "not listed"}
		}},
		{"wrong shard", func(t *testing.T, dir string, names []string) {
			m := goodIndex(names)
			m["a"] = names[1]
			writeIndex(t, dir, m)
		}, func(dir string, names []string) []string {
			return []string{`"a"`, "in shard " + filepath.Join(dir, names[1]), "it is in " + filepath.Join(dir, names[0])}
		}},
		{"tensor in two shards", func(t *testing.T, dir string, names []string) {
			mustWrite(t, filepath.Join(dir, names[1]), []WriteTensor{
				{Name: "a", DType: F32, Shape: []int{2}, Data: f32s(1, 2)},
				{Name: "c", DType: BF16, Shape: []int{4}, Data: u16s(6, 7, 8, 9)},
			}, nil)
			writeIndex(t, dir, goodIndex(names))
		}, func(dir string, names []string) []string {
			return []string{`"a"`, "both", filepath.Join(dir, names[0]), filepath.Join(dir, names[1])}
		}},
		{"dotdot shard", func(t *testing.T, dir string, names []string) {
			m := goodIndex(names)
			m["b"] = "../" + names[0]
			writeIndex(t, dir, m)
		}, func(_ string, names []string) []string { return []string{`"b"`, `"../` + names[0] + `"`, "escapes"} }},
		{"absolute shard", func(t *testing.T, dir string, names []string) {
			m := goodIndex(names)
			m["b"] = filepath.Join(dir, names[0])
			writeIndex(t, dir, m)
		}, func(dir string, names []string) []string {
			return []string{`"b"`, filepath.Join(dir, names[0]), "escapes"}
		}},
		{"bad shard", func(t *testing.T, dir string, names []string) {
			os.Truncate(filepath.Join(dir, names[2]), 4)
			writeIndex(t, dir, goodIndex(names))
		}, func(dir string, names []string) []string { return []string{filepath.Join(dir, names[2]), "4 bytes"} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, names := shardDir(t)
			tc.setup(t, dir, names)
			c, err := OpenDir(dir)
			parts := tc.parts(dir, names)
			if tc.name != "bad shard" { // shard errors name the shard instead
				parts = append(parts, "index "+filepath.Join(dir, "model.safetensors.index.json"))
			}
			wantErr(t, err, parts...)
			if c != nil {
				t.Error("got a checkpoint along with the error")
			}
			for _, n := range names {
				if mapped(t, filepath.Join(dir, n)) {
					t.Errorf("%s left mapped after a failed open", n)
				}
			}
		})
	}
}

// The repo's golden checkpoints come from an independent writer (MLX), so
// they check that real files parse and survive a rewrite unchanged.
func TestGoldenCheckpoints(t *testing.T) {
	for _, dir := range []string{"../../testdata/golden/tiny-a", "../../testdata/golden/tiny-b"} {
		if _, err := os.Stat(dir); err != nil {
			t.Skip("golden checkpoints not present")
		}
		c, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var ws []WriteTensor
		for _, n := range c.Names() {
			tn, _ := c.Tensor(n)
			ws = append(ws, WriteTensor{tn.Name, tn.DType, tn.Shape, tn.Data})
		}
		if len(ws) == 0 {
			t.Fatalf("%s: no tensors", dir)
		}
		path := filepath.Join(t.TempDir(), "copy.safetensors")
		mustWrite(t, path, ws, c.Metadata())
		cp, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer cp.Close()
		for _, w := range ws {
			g, ok := cp.Tensor(w.Name)
			if !ok || g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
				t.Fatalf("%s: tensor %q changed in the rewrite", dir, w.Name)
			}
		}
	}
}
