// Command icons draws the menu-bar app's icons: the status-item template images (black and alpha,
// 1x and 2x) for the states off, working, ready and error, and the app icon (AppIcon.icns plus a
// PNG preview).
//
// Run it from the repository root: go run ./tools/icons (writes into resources/).
package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"log"
	"math"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("out", "resources", "directory that receives icons/ and AppIcon.icns")
	flag.Parse()
	if err := writeAll(*out); err != nil {
		log.Fatal(err)
	}
}

// States are the status-item variants, in the order the app knows them.
var States = []string{"off", "working", "ready", "error"}

// StatusPoints is the status icon's size in points (18×18, the menu bar's usual glyph box).
const StatusPoints = 18

// writeAll writes every icon under dir.
func writeAll(dir string) error {
	icons := filepath.Join(dir, "icons")
	if err := os.MkdirAll(icons, 0o755); err != nil {
		return err
	}
	for _, st := range States {
		for _, scale := range []int{1, 2} {
			name := "status-" + st + ".png"
			if scale == 2 {
				name = "status-" + st + "@2x.png"
			}
			if err := writePNG(filepath.Join(icons, name), StatusIcon(st, scale)); err != nil {
				return err
			}
		}
	}
	if err := writePNG(filepath.Join(icons, "AppIcon.png"), AppIcon(512)); err != nil {
		return err
	}
	icns, err := ICNS()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "AppIcon.icns"), icns, 0o644)
}

func writePNG(path string, img image.Image) error {
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, img); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// shape reports whether a point (in the icon's own units) is inside.
type shape func(x, y float64) bool

func union(s ...shape) shape {
	return func(x, y float64) bool {
		for _, f := range s {
			if f(x, y) {
				return true
			}
		}
		return false
	}
}

func minus(a, b shape) shape { return func(x, y float64) bool { return a(x, y) && !b(x, y) } }

func circle(cx, cy, r float64) shape {
	return func(x, y float64) bool { return (x-cx)*(x-cx)+(y-cy)*(y-cy) <= r*r }
}

func roundRect(x0, y0, x1, y1, r float64) shape {
	return func(x, y float64) bool {
		if x < x0 || x > x1 || y < y0 || y > y1 {
			return false
		}
		cx := math.Max(x0+r, math.Min(x, x1-r))
		cy := math.Max(y0+r, math.Min(y, y1-r))
		return (x-cx)*(x-cx)+(y-cy)*(y-cy) <= r*r
	}
}

// petal is a pointed lens (the intersection of two circles) from radius r0 to r1 around (cx, cy),
// at angle a (radians, 0 = pointing right, y grows downward), of the given maximum width, shrunk
// by inset on every side (inset > 0 gives the inner edge of an outline).
func petal(cx, cy, a, r0, r1, width, inset float64) shape {
	l := r1 - r0
	sum := l * l / (2 * width) // R + d
	r := (sum+width/2)/2 - inset
	d := (sum - width/2) / 2
	mid := (r0 + r1) / 2
	ca, sa := math.Cos(a), math.Sin(a)
	return func(x, y float64) bool {
		dx, dy := x-cx, y-cy
		u := dx*ca + dy*sa - mid // along the petal
		v := -dx*sa + dy*ca      // across it
		return u*u+(v-d)*(v-d) <= r*r && u*u+(v+d)*(v+d) <= r*r
	}
}

// lily is the six-petal flower of both icon families, centred on (c, c) with outer radius rOut.
type lily struct {
	c, r0, rOut, width float64
}

func (f lily) angle(k int) float64 { return -math.Pi/2 + float64(k)*math.Pi/3 }

func (f lily) petal(k int, inset float64) shape {
	return petal(f.c, f.c, f.angle(k), f.r0, f.rOut, f.width, inset)
}

// filled is the whole flower.
func (f lily) filled() shape {
	var s []shape
	for k := 0; k < 6; k++ {
		s = append(s, f.petal(k, 0))
	}
	return union(s...)
}

// outlined draws petal k as an outline of the given stroke, or filled when fill[k].
func (f lily) mixed(stroke float64, fill [6]bool) shape {
	var s []shape
	for k := 0; k < 6; k++ {
		if fill[k] {
			s = append(s, f.petal(k, 0))
		} else {
			s = append(s, minus(f.petal(k, 0), f.petal(k, stroke)))
		}
	}
	return union(s...)
}

// statusShape is the template glyph of a state, in points (0..18).
func statusShape(state string) shape {
	f := lily{c: 9, r0: 0.6, rOut: 8.8, width: 4.6}
	const stroke = 1.15
	heart := circle(9, 9, 1.3) // an open centre keeps the petals apart at 1x
	switch state {
	case "ready":
		return minus(f.filled(), heart)
	case "working":
		return minus(f.mixed(stroke, [6]bool{true, false, true, false, true, false}), heart)
	case "error":
		// The outlined flower with an exclamation badge at the lower right, cut free by a ring.
		bx, by, br := 13.4, 13.4, 4.6
		badge := minus(circle(bx, by, br), union(
			roundRect(bx-0.75, by-3.1, bx+0.75, by+0.7, 0.75),
			circle(bx, by+2.15, 0.85),
		))
		return union(minus(f.mixed(stroke, [6]bool{}), union(heart, circle(bx, by, br+1.1))), badge)
	default: // off
		return minus(f.mixed(stroke, [6]bool{}), heart)
	}
}

// coverage is the fraction of the pixel (px, py) at scale s that shape covers, from an n×n grid.
func coverage(sh shape, px, py int, scale float64, n int) float64 {
	hit := 0
	for j := 0; j < n; j++ {
		for i := 0; i < n; i++ {
			x := (float64(px) + (float64(i)+0.5)/float64(n)) / scale
			y := (float64(py) + (float64(j)+0.5)/float64(n)) / scale
			if sh(x, y) {
				hit++
			}
		}
	}
	return float64(hit) / float64(n*n)
}

// StatusIcon is a state's template image: black, the shape in the alpha channel.
func StatusIcon(state string, scale int) *image.NRGBA {
	size := StatusPoints * scale
	sh := statusShape(state)
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	for y := 0; y < size; y++ {
		for x := 0; x < size; x++ {
			a := coverage(sh, x, y, float64(scale), 8)
			img.SetNRGBA(x, y, color.NRGBA{A: uint8(math.Round(a * 255))})
		}
	}
	return img
}

// AppIcon is the colour app icon at size×size pixels: the lily in white on a rounded square.
func AppIcon(size int) *image.NRGBA {
	// Units: a 1024 canvas; macOS icons keep the square within 100 units of each edge.
	scale := float64(size) / 1024
	square := roundRect(100, 100, 924, 924, 185)
	f := lily{c: 512, r0: 40, rOut: 330, width: 168}
	petals := f.filled()
	heart := circle(512, 512, 58)
	var stamens []shape
	for k := 0; k < 6; k++ {
		a := f.angle(k) + math.Pi/6
		stamens = append(stamens, circle(512+118*math.Cos(a), 512+118*math.Sin(a), 17))
	}
	dots := union(stamens...)
	top := [3]float64{0xF7, 0xC6, 0xDF}    // rose
	bottom := [3]float64{0x8E, 0x6B, 0xD8} // lilac
	white := [3]float64{0xFF, 0xFF, 0xFF}
	gold := [3]float64{0xF4, 0xB9, 0x42}
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	n := 4
	if size <= 64 {
		n = 8
	}
	for py := 0; py < size; py++ {
		for px := 0; px < size; px++ {
			var acc [3]float64
			var alpha float64
			for j := 0; j < n; j++ {
				for i := 0; i < n; i++ {
					x := (float64(px) + (float64(i)+0.5)/float64(n)) / scale
					y := (float64(py) + (float64(j)+0.5)/float64(n)) / scale
					if !square(x, y) {
						continue
					}
					t := (y - 100) / 824
					c := [3]float64{top[0] + (bottom[0]-top[0])*t, top[1] + (bottom[1]-top[1])*t, top[2] + (bottom[2]-top[2])*t}
					switch {
					case heart(x, y) || dots(x, y):
						c = gold
					case petals(x, y):
						c = white
					}
					for k := range acc {
						acc[k] += c[k]
					}
					alpha++
				}
			}
			if alpha == 0 {
				continue
			}
			img.SetNRGBA(px, py, color.NRGBA{
				R: uint8(math.Round(acc[0] / alpha)), G: uint8(math.Round(acc[1] / alpha)), B: uint8(math.Round(acc[2] / alpha)),
				A: uint8(math.Round(alpha / float64(n*n) * 255)),
			})
		}
	}
	return img
}

// icnsEntries are the PNG-encoded members of AppIcon.icns: OSType and pixel size.
var icnsEntries = []struct {
	typ  string
	size int
}{
	{"icp4", 16}, {"icp5", 32}, {"ic11", 32}, {"ic12", 64}, {"ic07", 128},
	{"ic13", 256}, {"ic08", 256}, {"ic14", 512}, {"ic09", 512}, {"ic10", 1024},
}

// ICNS builds AppIcon.icns: the 'icns' header, then one PNG per entry (type, big-endian length
// including the 8-byte entry header, data).
func ICNS() ([]byte, error) {
	pngs := map[int][]byte{}
	var body bytes.Buffer
	for _, e := range icnsEntries {
		data, ok := pngs[e.size]
		if !ok {
			var b bytes.Buffer
			if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, AppIcon(e.size)); err != nil {
				return nil, err
			}
			data = b.Bytes()
			pngs[e.size] = data
		}
		body.WriteString(e.typ)
		binary.Write(&body, binary.BigEndian, uint32(8+len(data)))
		body.Write(data)
	}
	var out bytes.Buffer
	out.WriteString("icns")
	if err := binary.Write(&out, binary.BigEndian, uint32(8+body.Len())); err != nil {
		return nil, fmt.Errorf("icns: %w", err)
	}
	out.Write(body.Bytes())
	return out.Bytes(), nil
}
