package vision

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/image/webp"

	"github.com/lilyformac/lily/engine/config"
)

var (
	// ErrUnsupportedFormat marks data that is no image Lily decodes.
	ErrUnsupportedFormat = errors.New("unsupported image format")
	// ErrTooLarge marks an image whose header declares more pixels than the decode limit.
	ErrTooLarge = errors.New("image too large")
)

// DefaultMaxDecodePixels bounds what Decode will inflate: PIL's decompression-bomb threshold
// (about 0.36 GB as RGBA). A few hundred bytes of PNG can declare a gigapixel image.
const DefaultMaxDecodePixels = 89_478_485

type codec struct {
	config func(io.Reader) (image.Config, error)
	decode func(io.Reader) (image.Image, error)
}

// codecs are called directly rather than through image.Decode, so the format comes from the
// sniffed magic bytes and no other package's registered decoders are reached.
var codecs = map[string]codec{
	"png":  {png.DecodeConfig, png.Decode},
	"jpeg": {jpeg.DecodeConfig, jpeg.Decode},
	"gif":  {gif.DecodeConfig, gif.Decode}, // the first frame, as PIL opens a GIF
	"webp": {webp.DecodeConfig, webp.Decode},
}

// Decode reads a PNG, JPEG, GIF or WebP image within DefaultMaxDecodePixels, and names its
// format ("png", "jpeg", "gif", "webp").
func Decode(data []byte) (image.Image, string, error) {
	return DecodeLimit(data, DefaultMaxDecodePixels)
}

// DecodeLimit is Decode refusing, from the header alone, an image over maxPixels pixels.
func DecodeLimit(data []byte, maxPixels int) (image.Image, string, error) {
	_, format, err := DecodeConfigLimit(data, maxPixels)
	if err != nil {
		return nil, format, err
	}
	img, err := codecs[format].decode(bytes.NewReader(data))
	if err != nil {
		return nil, format, fmt.Errorf("vision: decoding the %s image: %w", format, err)
	}
	return img, format, nil
}

// sniff names a decodable format from its magic bytes, or says what the data looks like.
func sniff(b []byte) (string, error) {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "png", nil
	case bytes.HasPrefix(b, []byte{0xff, 0xd8, 0xff}):
		return "jpeg", nil
	case bytes.HasPrefix(b, []byte("GIF87a")) || bytes.HasPrefix(b, []byte("GIF89a")):
		return "gif", nil
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return "webp", nil
	case len(b) == 0:
		return "", fmt.Errorf("%w: the image data is empty", ErrUnsupportedFormat)
	}
	if name := foreignFormat(b); name != "" {
		return "", fmt.Errorf("%w: %s images are not supported (PNG, JPEG, GIF and WebP are)", ErrUnsupportedFormat, name)
	}
	return "", fmt.Errorf("%w: the data is not a PNG, JPEG, GIF or WebP image (it starts % x)",
		ErrUnsupportedFormat, b[:min(len(b), 8)])
}

// foreignFormat recognises image formats clients send that Lily does not decode, so the error
// tells the user what to convert.
func foreignFormat(b []byte) string {
	if len(b) >= 12 && string(b[4:8]) == "ftyp" { // ISO base media: the brand says which
		switch string(b[8:12]) {
		case "heic", "heix", "hevc", "hevx", "heim", "heis", "hevm", "hevs":
			return "HEIC"
		case "avif", "avis":
			return "AVIF"
		case "mif1", "msf1":
			return "HEIF"
		}
	}
	prefixes := []struct{ magic, name string }{
		{"BM", "BMP"}, {"II*\x00", "TIFF"}, {"MM\x00*", "TIFF"}, {"%PDF", "PDF"}, {"8BPS", "PSD"},
		{"\x00\x00\x01\x00", "ICO"}, {"\xff\x0a", "JPEG XL"}, {"\x00\x00\x00\x0cJXL ", "JPEG XL"},
		{"<svg", "SVG"}, {"<?xml", "SVG/XML"},
	}
	for _, p := range prefixes {
		if bytes.HasPrefix(b, []byte(p.magic)) {
			return p.name
		}
	}
	return ""
}

// ToRGB converts an image to 8-bit RGB the way PIL's convert("RGB") does: alpha is dropped, not
// composited over a background (a transparent pixel keeps its stored colour), grey is
// replicated, palettes give their colours and 16-bit samples keep their high byte.
func ToRGB(img image.Image) *RGB8 {
	b := img.Bounds()
	out := NewRGB8(b.Dx(), b.Dy())
	switch m := img.(type) {
	case *image.NRGBA:
		copyRGBX(out, m.Pix, m.Stride, b, m.Rect.Min, nil)
	case *image.RGBA:
		copyRGBX(out, m.Pix, m.Stride, b, m.Rect.Min, func(p []uint8) (uint8, uint8, uint8) {
			return rgbOf(color.RGBA{p[0], p[1], p[2], p[3]})
		})
	case *image.Paletted:
		var pal [256][3]uint8
		for i, c := range m.Palette {
			pal[i][0], pal[i][1], pal[i][2] = rgbOf(c)
		}
		fill(out, b, func(x, y int) (uint8, uint8, uint8) {
			p := pal[m.ColorIndexAt(x, y)]
			return p[0], p[1], p[2]
		})
	case *image.Gray:
		fill(out, b, func(x, y int) (uint8, uint8, uint8) {
			v := m.Pix[m.PixOffset(x, y)]
			return v, v, v
		})
	case *image.YCbCr:
		fill(out, b, func(x, y int) (uint8, uint8, uint8) {
			yi, ci := m.YOffset(x, y), m.COffset(x, y)
			return color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
		})
	case *image.NYCbCrA: // lossy WebP with alpha: the colour planes alone
		return ToRGB(&m.YCbCr)
	default:
		fill(out, b, func(x, y int) (uint8, uint8, uint8) { return rgbOf(m.At(x, y)) })
	}
	return out
}

// copyRGBX copies 4-byte pixels' first three bytes, or passes each pixel through conv.
func copyRGBX(out *RGB8, pix []uint8, stride int, b image.Rectangle, origin image.Point, conv func([]uint8) (uint8, uint8, uint8)) {
	for y := 0; y < out.H; y++ {
		row := pix[(b.Min.Y-origin.Y+y)*stride+(b.Min.X-origin.X)*4:]
		dst := out.Pix[y*out.W*3 : (y+1)*out.W*3]
		for x := 0; x < out.W; x++ {
			p := row[4*x : 4*x+4]
			if conv == nil || p[3] == 255 { // opaque premultiplied pixels are already plain colour
				dst[3*x], dst[3*x+1], dst[3*x+2] = p[0], p[1], p[2]
			} else {
				dst[3*x], dst[3*x+1], dst[3*x+2] = conv(p)
			}
		}
	}
}

func fill(out *RGB8, b image.Rectangle, at func(x, y int) (uint8, uint8, uint8)) {
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			out.Pix[i], out.Pix[i+1], out.Pix[i+2] = at(x, y)
			i += 3
		}
	}
}

// rgbOf is one colour's RGB with its alpha dropped. Premultiplied colours are first divided by
// their alpha, since PIL stores straight colour; colour models without alpha convert directly.
func rgbOf(c color.Color) (uint8, uint8, uint8) {
	switch c := c.(type) {
	case color.NRGBA:
		return c.R, c.G, c.B
	case color.NRGBA64:
		return uint8(c.R >> 8), uint8(c.G >> 8), uint8(c.B >> 8)
	case color.Gray:
		return c.Y, c.Y, c.Y
	case color.Gray16:
		return uint8(c.Y >> 8), uint8(c.Y >> 8), uint8(c.Y >> 8)
	case color.YCbCr:
		return color.YCbCrToRGB(c.Y, c.Cb, c.Cr)
	case color.NYCbCrA:
		return color.YCbCrToRGB(c.Y, c.Cb, c.Cr)
	case color.CMYK:
		return color.CMYKToRGB(c.C, c.M, c.Y, c.K)
	}
	n := color.NRGBAModel.Convert(c).(color.NRGBA)
	return n.R, n.G, n.B
}

// Processor turns images into the tower's patch rows as Qwen2VLImageProcessor does: RGB,
// smart resize, bicubic resample, normalisation, block-major patches.
type Processor struct {
	PatchSize, Merge     int
	MinPixels, MaxPixels int        // the resized image's area bounds
	Mean, Std            [3]float32 // per channel, on the 0..1 scale
	Rescale              float64    // the byte-to-0..1 factor (1/255)
	MaxDecodePixels      int        // FromBytes refuses images declaring more pixels
}

// The reference's defaults for Qwen3.5/3.6: 256 to 16,384 tokens of 32×32 pixels.
const (
	defaultMinPixels = 65_536
	defaultMaxPixels = 16_777_216
)

// ServedMaxPixels is the resized area a server caps images at by default (WithMaxPixels; lily
// serve's --image-max-pixels), below the reference's: 2.5 MP keeps what agents send as it is
// (Claude Code's pastes come near 2000×1030, Codex fits its images in 2048×768) and bounds an
// image at about 2,560 tokens; a photo of 24 MP would otherwise take 16,000 tokens and minutes
// of tower. The GPU backend sizes the tower's activations for it.
const ServedMaxPixels = 2_621_440

// NewProcessor is the reference processor for the tower v describes (nil: the production one).
func NewProcessor(v *config.Vision) Processor {
	if v == nil {
		v = config.ProductionVision()
	}
	return Processor{
		PatchSize: v.PatchSize, Merge: v.Merge, MinPixels: defaultMinPixels, MaxPixels: defaultMaxPixels,
		Mean: [3]float32{0.5, 0.5, 0.5}, Std: [3]float32{0.5, 0.5, 0.5}, Rescale: 1.0 / 255,
		MaxDecodePixels: DefaultMaxDecodePixels,
	}
}

// WithMaxPixels caps the resized area at n pixels (n ≤ 0 or above the current cap: unchanged),
// lowering the minimum with it, so a server can bound a tower's cost below the reference's.
func (p Processor) WithMaxPixels(n int) Processor {
	if n > 0 && n < p.MaxPixels {
		p.MaxPixels = n
		p.MinPixels = min(p.MinPixels, n)
	}
	return p
}

// preprocessorFile is the part of preprocessor_config.json that changes the pixels.
type preprocessorFile struct {
	Size *struct {
		ShortestEdge *int `json:"shortest_edge"`
		LongestEdge  *int `json:"longest_edge"`
	} `json:"size"`
	MinPixels     *int      `json:"min_pixels"`
	MaxPixels     *int      `json:"max_pixels"`
	PatchSize     *int      `json:"patch_size"`
	MergeSize     *int      `json:"merge_size"`
	TemporalPatch *int      `json:"temporal_patch_size"`
	ImageMean     []float64 `json:"image_mean"`
	ImageStd      []float64 `json:"image_std"`
	RescaleFactor *float64  `json:"rescale_factor"`
}

// LoadProcessor reads dir/preprocessor_config.json over NewProcessor's defaults; without the
// file the defaults stand. Patch, merge and temporal sizes must agree with the tower's config.
func LoadProcessor(dir string, v *config.Vision) (Processor, error) {
	p := NewProcessor(v)
	if v == nil {
		v = config.ProductionVision()
	}
	path := filepath.Join(dir, "preprocessor_config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("vision: %w", err)
	}
	var f preprocessorFile
	if err := json.Unmarshal(data, &f); err != nil {
		return p, fmt.Errorf("vision: %s: %w", path, err)
	}
	if err := f.apply(&p, v); err != nil {
		return p, fmt.Errorf("vision: %s: %w", path, err)
	}
	return p, p.validate()
}

// apply copies the file's values into p. As in transformers, top-level min_pixels/max_pixels
// override the size object's edges.
func (f *preprocessorFile) apply(p *Processor, v *config.Vision) error {
	for _, c := range []struct {
		name string
		got  *int
		want int
	}{{"patch_size", f.PatchSize, v.PatchSize}, {"merge_size", f.MergeSize, v.Merge}, {"temporal_patch_size", f.TemporalPatch, v.TemporalPatch}} {
		if c.got != nil && *c.got != c.want {
			return fmt.Errorf("%s is %d but the vision config says %d", c.name, *c.got, c.want)
		}
	}
	if f.Size != nil {
		if f.Size.ShortestEdge == nil || f.Size.LongestEdge == nil {
			return errors.New(`"size" needs both "shortest_edge" and "longest_edge"`)
		}
		p.MinPixels, p.MaxPixels = *f.Size.ShortestEdge, *f.Size.LongestEdge
	}
	if f.MinPixels != nil {
		p.MinPixels = *f.MinPixels
	}
	if f.MaxPixels != nil {
		p.MaxPixels = *f.MaxPixels
	}
	if f.RescaleFactor != nil {
		p.Rescale = *f.RescaleFactor
	}
	if err := readTriple("image_mean", f.ImageMean, &p.Mean); err != nil {
		return err
	}
	return readTriple("image_std", f.ImageStd, &p.Std)
}

func readTriple(name string, vals []float64, dst *[3]float32) error {
	switch len(vals) {
	case 0:
		return nil
	case 3:
		for i, x := range vals {
			dst[i] = float32(x)
		}
		return nil
	}
	return fmt.Errorf("%s has %d values, want 3", name, len(vals))
}

func (p Processor) validate() error {
	f := p.PatchSize * p.Merge
	switch {
	case p.PatchSize <= 0 || p.Merge <= 0:
		return fmt.Errorf("vision: patch size %d and merge %d must be positive", p.PatchSize, p.Merge)
	case p.MinPixels < 0 || p.MaxPixels < f*f || p.MinPixels > p.MaxPixels:
		return fmt.Errorf("vision: pixel bounds [%d, %d] must be ordered and allow one %d×%d block", p.MinPixels, p.MaxPixels, f, f)
	case !(p.Rescale > 0):
		return fmt.Errorf("vision: rescale factor %v must be positive", p.Rescale)
	}
	for c, s := range p.Std {
		if !(s > 0) {
			return fmt.Errorf("vision: image_std[%d] = %v must be positive", c, s)
		}
	}
	return nil
}

// FromBytes decodes an image (within MaxDecodePixels) and preprocesses it.
func (p Processor) FromBytes(data []byte) (*Pixels, error) {
	img, _, err := DecodeLimit(data, p.MaxDecodePixels)
	if err != nil {
		return nil, err
	}
	return p.Pixels(img)
}

// Pixels preprocesses a decoded image.
func (p Processor) Pixels(img image.Image) (*Pixels, error) {
	return p.FromRGB(ToRGB(img))
}

// FromRGB resizes an RGB image to the smart size and cuts it into normalised patch rows.
func (p Processor) FromRGB(rgb *RGB8) (*Pixels, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	h, w, err := SmartResize(rgb.H, rgb.W, p.PatchSize*p.Merge, p.MinPixels, p.MaxPixels)
	if err != nil {
		return nil, err
	}
	return p.patchify(Resize(rgb, w, h)), nil
}

// normTable holds each channel's normalised value of every byte. transformers fuses the 1/255
// rescale into the normalisation (mean/rescale, std/rescale, in float64) and then computes
// (x − mean)/std in float32; the table does the same arithmetic once per byte value.
func (p Processor) normTable() *[3][256]float32 {
	var t [3][256]float32
	for c := range 3 {
		mean := float32(float64(p.Mean[c]) / p.Rescale)
		std := float32(float64(p.Std[c]) / p.Rescale)
		for x := range 256 {
			t[c][x] = (float32(x) - mean) / std
		}
	}
	return &t
}

// patchify cuts img (sides multiples of PatchSize·Merge) into rows [c][y][x], block-major: the
// Merge×Merge blocks row-major, the patches inside a block row-major.
func (p Processor) patchify(img *RGB8) *Pixels {
	ps, m := p.PatchSize, p.Merge
	px := &Pixels{GridH: img.H / ps, GridW: img.W / ps, Merge: m}
	n := 3 * ps * ps
	buf := make([]float32, px.GridH*px.GridW*n)
	px.Rows = make([][]float32, 0, px.GridH*px.GridW)
	t := p.normTable()
	for bh := 0; bh < px.GridH/m; bh++ {
		for bw := 0; bw < px.GridW/m; bw++ {
			for i := 0; i < m; i++ {
				for j := 0; j < m; j++ {
					row := buf[len(px.Rows)*n : (len(px.Rows)+1)*n]
					fillPatch(row, img, (bh*m+i)*ps, (bw*m+j)*ps, ps, t)
					px.Rows = append(px.Rows, row)
				}
			}
		}
	}
	return px
}

// fillPatch writes the ps×ps patch whose top-left pixel is (x0, y0) as [c][y][x].
func fillPatch(row []float32, img *RGB8, y0, x0, ps int, t *[3][256]float32) {
	for y := 0; y < ps; y++ {
		src := img.Pix[((y0+y)*img.W+x0)*3:]
		for x := 0; x < ps; x++ {
			for c := range 3 {
				row[c*ps*ps+y*ps+x] = t[c][src[3*x+c]]
			}
		}
	}
}
