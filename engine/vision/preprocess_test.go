package vision

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
)

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func firstRGB(t *testing.T, data []byte, wantFormat string) [3]uint8 {
	t.Helper()
	img, format, err := Decode(data)
	if err != nil || format != wantFormat {
		t.Fatalf("Decode: format %q, %v; want %q", format, err, wantFormat)
	}
	rgb := ToRGB(img)
	return [3]uint8{rgb.Pix[0], rgb.Pix[1], rgb.Pix[2]}
}

func TestDecodePNGDropsAlpha(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 2, 1))
	img.SetNRGBA(0, 0, color.NRGBA{10, 20, 30, 0}) // fully transparent: its colour stays
	img.SetNRGBA(1, 0, color.NRGBA{200, 100, 50, 128})
	data := encodePNG(t, img)
	if got := firstRGB(t, data, "png"); got != [3]uint8{10, 20, 30} {
		t.Errorf("transparent pixel became %v, want its stored 10 20 30", got)
	}
	dec, _, _ := Decode(data)
	if rgb := ToRGB(dec); !bytes.Equal(rgb.Pix[3:], []uint8{200, 100, 50}) {
		t.Errorf("half-transparent pixel became %v, want 200 100 50 (not composited)", rgb.Pix[3:])
	}
}

func TestToRGBColourModels(t *testing.T) {
	g16 := image.NewGray16(image.Rect(0, 0, 1, 1))
	g16.SetGray16(0, 0, color.Gray16{0xabcd})
	rgba := image.NewRGBA(image.Rect(0, 0, 1, 1))
	rgba.SetRGBA(0, 0, color.RGBA{5, 10, 15, 128}) // premultiplied: straight colour is ×255/128
	n64 := image.NewNRGBA64(image.Rect(0, 0, 1, 1))
	n64.SetNRGBA64(0, 0, color.NRGBA64{0x1234, 0x5678, 0x9abc, 0})
	pal := image.NewPaletted(image.Rect(0, 0, 1, 1), color.Palette{color.Black, color.NRGBA{7, 8, 9, 0}})
	pal.SetColorIndex(0, 0, 1)
	gray := image.NewGray(image.Rect(0, 0, 1, 1))
	gray.SetGray(0, 0, color.Gray{77})
	sub := image.NewNRGBA(image.Rect(0, 0, 3, 3))
	sub.SetNRGBA(2, 1, color.NRGBA{1, 2, 3, 255})
	cases := []struct {
		name string
		img  image.Image
		want [3]uint8
	}{
		{"gray16 high byte", g16, [3]uint8{0xab, 0xab, 0xab}},
		// 5·65535/128 = 2559 → 9; 10·65535/128 = 5119 → 19; 15·65535/128 = 7679 → 29 (>> 8).
		{"premultiplied RGBA", rgba, [3]uint8{9, 19, 29}},
		{"NRGBA64 high byte, alpha 0 dropped", n64, [3]uint8{0x12, 0x56, 0x9a}},
		{"palette colour", pal, [3]uint8{7, 8, 9}},
		{"gray replicated", gray, [3]uint8{77, 77, 77}},
		{"sub-image origin", sub.SubImage(image.Rect(2, 1, 3, 2)), [3]uint8{1, 2, 3}},
	}
	for _, c := range cases {
		rgb := ToRGB(c.img)
		if got := [3]uint8(rgb.Pix[:3]); got != c.want || rgb.W != 1 || rgb.H != 1 {
			t.Errorf("%s: %v (%d×%d), want %v", c.name, got, rgb.W, rgb.H, c.want)
		}
	}
}

func TestDecodeJPEGAndGIF(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 16, 16))
	for i := 0; i < len(img.Pix); i += 4 {
		copy(img.Pix[i:], []uint8{200, 60, 30, 255})
	}
	var j bytes.Buffer
	if err := jpeg.Encode(&j, img, &jpeg.Options{Quality: 100}); err != nil {
		t.Fatal(err)
	}
	got := firstRGB(t, j.Bytes(), "jpeg")
	for c, want := range []uint8{200, 60, 30} {
		if math.Abs(float64(got[c])-float64(want)) > 4 { // lossy: a few levels of chroma error
			t.Errorf("JPEG channel %d = %d, want about %d", c, got[c], want)
		}
	}
	pal := image.NewPaletted(image.Rect(0, 0, 4, 4), color.Palette{color.RGBA{1, 2, 3, 255}, color.RGBA{250, 128, 4, 255}})
	pal.SetColorIndex(0, 0, 1)
	var g bytes.Buffer
	if err := gif.Encode(&g, pal, nil); err != nil {
		t.Fatal(err)
	}
	if got := firstRGB(t, g.Bytes(), "gif"); got != [3]uint8{250, 128, 4} {
		t.Errorf("GIF pixel %v, want 250 128 4", got)
	}
}

// bitWriter packs values least significant bit first, as VP8L reads them.
type bitWriter struct {
	buf   []byte
	nbits int
}

func (w *bitWriter) put(v uint32, n int) {
	for i := 0; i < n; i++ {
		if w.nbits%8 == 0 {
			w.buf = append(w.buf, 0)
		}
		w.buf[len(w.buf)-1] |= byte((v>>i)&1) << (w.nbits % 8)
		w.nbits++
	}
}

// losslessWebP builds a 1×1 VP8L file by hand: no transforms, no colour cache, and five
// single-symbol prefix codes (green, red, blue, alpha, distance) that spell the pixel.
func losslessWebP(r, g, b, a uint8) []byte {
	w := &bitWriter{}
	w.put(0x2f, 8) // VP8L signature
	w.put(0, 14)   // width − 1
	w.put(0, 14)   // height − 1
	w.put(1, 1)    // alpha is used
	w.put(0, 3)    // version
	w.put(0, 1)    // no transform
	w.put(0, 1)    // no colour cache
	w.put(0, 1)    // no meta prefix codes
	for _, s := range []uint8{g, r, b, a} {
		w.put(1, 1) // simple code
		w.put(0, 1) // one symbol
		w.put(1, 1) // an 8-bit symbol
		w.put(uint32(s), 8)
	}
	w.put(1, 1) // distance code: simple, one 1-bit symbol 0
	w.put(0, 1)
	w.put(0, 1)
	w.put(0, 1)
	payload := w.buf
	if len(payload)%2 == 1 {
		payload = append(payload, 0) // RIFF chunks are padded to even length
	}
	out := []byte("RIFF")
	out = binary.LittleEndian.AppendUint32(out, uint32(4+8+len(payload)))
	out = append(out, "WEBPVP8L"...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(w.buf)))
	return append(out, payload...)
}

func TestDecodeWebP(t *testing.T) {
	if got := firstRGB(t, losslessWebP(11, 22, 33, 0), "webp"); got != [3]uint8{11, 22, 33} {
		t.Errorf("WebP pixel %v, want 11 22 33 (alpha 0 dropped)", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := encodePNG(t, image.NewGray(image.Rect(0, 0, 8, 8)))
	cases := []struct {
		name, data, want string
	}{
		{"HEIC", "\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic", "HEIC images are not supported"},
		{"AVIF", "\x00\x00\x00\x1cftypavif\x00\x00\x00\x00", "AVIF images are not supported"},
		{"BMP", "BM\x36\x00\x00\x00", "BMP images are not supported"},
		{"unknown", "hello, world", "68 65 6c 6c"},
		{"empty", "", "empty"},
		{"truncated PNG", string(good[:len(good)-20]), "png"},
		{"PNG header only", string(good[:8]), "png"},
		{"corrupt JPEG", "\xff\xd8\xff\xe0garbage", "jpeg"},
		{"corrupt WebP", "RIFF\x10\x00\x00\x00WEBPVP8 junk", "webp"},
	}
	for _, c := range cases {
		_, _, err := Decode([]byte(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	if _, _, err := Decode(good); err != nil {
		t.Errorf("the intact PNG: %v", err)
	}
}

// TestDecodeBomb declares a 100000×100000 PNG in a few dozen bytes: the header alone must
// refuse it, before any pixel memory is asked for.
func TestDecodeBomb(t *testing.T) {
	ihdr := binary.BigEndian.AppendUint32([]byte("IHDR"), 100_000)
	ihdr = binary.BigEndian.AppendUint32(ihdr, 100_000)
	ihdr = append(ihdr, 8, 2, 0, 0, 0) // 8-bit RGB
	data := []byte("\x89PNG\r\n\x1a\n")
	data = binary.BigEndian.AppendUint32(data, 13)
	data = append(data, ihdr...)
	data = binary.BigEndian.AppendUint32(data, crc32.ChecksumIEEE(ihdr))
	if _, _, err := Decode(data); !errors.Is(err, ErrTooLarge) {
		t.Errorf("10-gigapixel header: %v, want ErrTooLarge", err)
	}
	small := encodePNG(t, image.NewGray(image.Rect(0, 0, 100, 100)))
	if _, _, err := DecodeLimit(small, 9_999); !errors.Is(err, ErrTooLarge) {
		t.Errorf("100×100 under a 9,999-pixel limit: %v", err)
	}
	if _, _, err := DecodeLimit(small, 10_000); err != nil {
		t.Errorf("100×100 under a 10,000-pixel limit: %v", err)
	}
}

// TestPatchOrder encodes each pixel's coordinates in its colour (R = x, G = y, B = x+y) and
// checks every value of every row against the block-major layout worked out independently.
func TestPatchOrder(t *testing.T) {
	const w, h = 96, 64 // a multiple of 32 each: no resize
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetNRGBA(x, y, color.NRGBA{uint8(x), uint8(y), uint8(x + y), 255})
		}
	}
	p := NewProcessor(config.ProductionVision())
	p.MinPixels = 0
	px, err := p.Pixels(img)
	if err != nil {
		t.Fatal(err)
	}
	if px.GridH != 4 || px.GridW != 6 || px.Merge != 2 || len(px.Rows) != 24 || px.Tokens() != 6 {
		t.Fatalf("grid %d×%d merge %d, %d rows", px.GridH, px.GridW, px.Merge, len(px.Rows))
	}
	for r, row := range px.Rows {
		block, within := r/4, r%4
		pr := (block/3)*2 + within/2 // 3 merged blocks per block row
		pc := (block%3)*2 + within%2
		if len(row) != 768 {
			t.Fatalf("row %d has %d values", r, len(row))
		}
		for i, v := range row {
			c, y, x := i/256, i%256/16, i%16
			X, Y := pc*16+x, pr*16+y
			want := []int{X, Y, (X + Y) % 256}[c]
			if got := int(math.Round(float64(v)*127.5 + 127.5)); got != want {
				t.Fatalf("row %d value %d (c %d y %d x %d) reads %d, want %d", r, i, c, y, x, got, want)
			}
		}
	}
}

func TestNormalisation(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 32, 32))
	img.SetNRGBA(0, 0, color.NRGBA{0, 127, 128, 255})
	img.SetNRGBA(1, 0, color.NRGBA{255, 255, 255, 255})
	p := NewProcessor(nil)
	p.MinPixels = 0
	px, err := p.Pixels(img)
	if err != nil {
		t.Fatal(err)
	}
	row := px.Rows[0]
	checks := []struct {
		name string
		got  float32
		want float32
	}{
		{"0", row[0], -1}, {"127", row[256], float32(-1.0 / 255)}, {"128", row[512], float32(1.0 / 255)}, {"255", row[1], 1},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("byte %s normalised to %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestFromBytesNoResizeIsExact: an image whose sides are multiples of 32 inside the bounds is
// not resampled, so every value is exactly its pixel's normalisation.
func TestFromBytesNoResizeIsExact(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 256, 256))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7 % 256)
		if i%4 == 3 {
			img.Pix[i] = 255
		}
	}
	px, err := NewProcessor(nil).FromBytes(encodePNG(t, img))
	if err != nil {
		t.Fatal(err)
	}
	if px.Tokens() != 64 || len(px.Rows) != 256 {
		t.Fatalf("%d tokens, %d rows; want 64, 256", px.Tokens(), len(px.Rows))
	}
	for i, v := range px.Rows[1] { // row 1: the patch right of the top-left one

		c, y, x := i/256, i%256/16, i%16
		b := img.Pix[y*img.Stride+(16+x)*4+c]
		if want := (float32(b) - 127.5) / 127.5; v != want {
			t.Fatalf("row 1 value %d = %v, want %v", i, v, want)
		}
	}
}

func TestProcessorUpscalesAndCaps(t *testing.T) {
	p := NewProcessor(nil)
	tiny, err := p.Pixels(image.NewGray(image.Rect(0, 0, 3, 2)))
	if err != nil || tiny.GridH*16*tiny.GridW*16 < 65_536 {
		t.Fatalf("a 3×2 image: %v, %+v", err, tiny)
	}
	capped := p.WithMaxPixels(65_536)
	if capped.MaxPixels != 65_536 || capped.MinPixels > 65_536 || p.WithMaxPixels(1<<30).MaxPixels != p.MaxPixels {
		t.Errorf("WithMaxPixels: %+v", capped)
	}
	px, err := capped.Pixels(image.NewGray(image.Rect(0, 0, 512, 512)))
	if err != nil || px.GridH != 16 || px.GridW != 16 {
		t.Fatalf("512×512 capped at 65,536 px: %v, grid %d×%d; want 16×16", err, px.GridH, px.GridW)
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "preprocessor_config.json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadProcessor(t *testing.T) {
	v := config.ProductionVision()
	p, err := LoadProcessor(t.TempDir(), v)
	if err != nil || p.MinPixels != 65_536 || p.MaxPixels != 16_777_216 || p.Mean != [3]float32{0.5, 0.5, 0.5} || p.PatchSize != 16 || p.Merge != 2 {
		t.Errorf("no file: %+v, %v", p, err)
	}
	qwen := `{"size": {"longest_edge": 1048576, "shortest_edge": 4096}, "patch_size": 16,
		"temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.25, 0.5, 0.75], "image_std": [0.1, 0.2, 0.3],
		"image_processor_type": "Qwen2VLImageProcessorFast"}`
	p, err = LoadProcessor(writeConfig(t, qwen), v)
	if err != nil || p.MinPixels != 4096 || p.MaxPixels != 1_048_576 || p.Mean != [3]float32{0.25, 0.5, 0.75} || p.Std != [3]float32{0.1, 0.2, 0.3} {
		t.Errorf("size object: %+v, %v", p, err)
	}
	p, err = LoadProcessor(writeConfig(t, `{"size": {"longest_edge": 1048576, "shortest_edge": 4096}, "min_pixels": 1024, "max_pixels": 2097152}`), v)
	if err != nil || p.MinPixels != 1024 || p.MaxPixels != 2_097_152 {
		t.Errorf("top-level min/max must override size: %+v, %v", p, err)
	}
	bad := []struct{ body, want string }{
		{`{"patch_size": 14}`, "patch_size"},
		{`{"merge_size": 3}`, "merge_size"},
		{`{"temporal_patch_size": 1}`, "temporal_patch_size"},
		{`{"size": {"longest_edge": 1048576}}`, "shortest_edge"},
		{`{"image_mean": [0.5, 0.5]}`, "image_mean"},
		{`{"image_std": [0.5, 0, 0.5]}`, "image_std"},
		{`{"min_pixels": 4000000, "max_pixels": 1000000}`, "pixel bounds"},
		{`{"patch_size": "16"}`, "patch_size"},
	}
	for _, b := range bad {
		if _, err := LoadProcessor(writeConfig(t, b.body), v); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v, want an error naming %q", b.body, err, b.want)
		}
	}
}
