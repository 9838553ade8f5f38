package main

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func decode(t *testing.T, data []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestCommittedStatusIcons checks that resources/icons holds what this program draws (pixel for
// pixel) and that every status image is a template: black, with the shape only in alpha.
func TestCommittedStatusIcons(t *testing.T) {
	for _, st := range States {
		for _, scale := range []int{1, 2} {
			name := "status-" + st + ".png"
			if scale == 2 {
				name = "status-" + st + "@2x.png"
			}
			data, err := os.ReadFile(filepath.Join("..", "..", "resources", "icons", name))
			if err != nil {
				t.Fatalf("%v (run: go run ./tools/icons)", err)
			}
			got, want := decode(t, data), StatusIcon(st, scale)
			if got.Bounds() != want.Bounds() || got.Bounds().Dx() != 18*scale {
				t.Fatalf("%s: bounds %v, want %v", name, got.Bounds(), want.Bounds())
			}
			opaque := 0
			for y := 0; y < 18*scale; y++ {
				for x := 0; x < 18*scale; x++ {
					r, g, b, a := got.At(x, y).RGBA()
					if r != 0 || g != 0 || b != 0 {
						t.Fatalf("%s: pixel %d,%d is not black (%d,%d,%d)", name, x, y, r, g, b)
					}
					if _, _, _, wa := want.At(x, y).RGBA(); wa != a {
						t.Fatalf("%s: pixel %d,%d alpha %d, generator draws %d (run: go run ./tools/icons)", name, x, y, a, wa)
					}
					if a > 0xffff/2 {
						opaque++
					}
				}
			}
			if frac := float64(opaque) / float64(18*18*scale*scale); frac < 0.1 || frac > 0.7 {
				t.Errorf("%s: %.0f%% of the pixels are inked", name, frac*100)
			}
		}
	}
}

// TestStatesDiffer makes sure each state has its own glyph.
func TestStatesDiffer(t *testing.T) {
	seen := map[string]string{}
	for _, st := range States {
		key := string(StatusIcon(st, 1).Pix)
		if other, ok := seen[key]; ok {
			t.Fatalf("%s and %s draw the same icon", st, other)
		}
		seen[key] = st
	}
}

// TestICNS parses the committed AppIcon.icns: header, entry lengths, and each PNG's size.
func TestICNS(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "resources", "AppIcon.icns"))
	if err != nil {
		t.Fatal(err)
	}
	if string(data[:4]) != "icns" || int(binary.BigEndian.Uint32(data[4:8])) != len(data) {
		t.Fatalf("bad icns header % x", data[:8])
	}
	sizes := map[string]int{}
	for _, e := range icnsEntries {
		sizes[e.typ] = e.size
	}
	n := 0
	for off := 8; off < len(data); n++ {
		typ, l := string(data[off:off+4]), int(binary.BigEndian.Uint32(data[off+4:off+8]))
		if l < 8 || off+l > len(data) {
			t.Fatalf("entry %q: length %d overruns the file", typ, l)
		}
		img := decode(t, data[off+8:off+l])
		if want, ok := sizes[typ]; !ok || img.Bounds().Dx() != want || img.Bounds().Dy() != want {
			t.Fatalf("entry %q: %v, want %d px", typ, img.Bounds(), sizes[typ])
		}
		off += l
	}
	if n != len(icnsEntries) {
		t.Fatalf("%d entries, want %d", n, len(icnsEntries))
	}
}
