package images_test

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/vision"
)

const tinyV = "../../testdata/vision/tiny-v"

var imageNames = []string{"landscape.png", "portrait.png", "small-alpha.png"}

// counting wraps a backend, counting tower runs; delay holds each run so concurrent callers
// are all waiting while it lasts; off turns vision off in Describe.
type counting struct {
	backend.Backend
	runs  atomic.Int64
	delay time.Duration
	off   string
}

func (c *counting) EncodeImage(px *vision.Pixels) ([][]float32, error) {
	c.runs.Add(1)
	time.Sleep(c.delay)
	return c.Backend.EncodeImage(px)
}

func (c *counting) Describe() backend.Description {
	d := c.Backend.Describe()
	if c.off != "" {
		d.Vision, d.VisionWhy = false, c.off
	}
	return d
}

var (
	loadOnce sync.Once
	tinyB    backend.Backend
	tinyProc vision.Processor
	loadErr  error
)

// tiny is tiny-v's CPU backend in a fresh counting wrapper, and its processor. The backend is
// loaded once: its tower is built on the first image.
func tiny(t *testing.T) (*counting, vision.Processor) {
	t.Helper()
	loadOnce.Do(func() {
		w, err := model.Load(tinyV)
		if err != nil {
			loadErr = err
			return
		}
		tinyB = cpu.New(w)
		tinyProc, loadErr = vision.LoadProcessor(tinyV, w.Config.Vision)
	})
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return &counting{Backend: tinyB}, tinyProc
}

func readImage(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(tinyV, "images", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func dataURL(data []byte) string {
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(data)
}

// altered is the PNG with one pixel changed: the same size, other bytes.
func altered(t *testing.T, data []byte) []byte {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	m := image.NewNRGBA(b)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			m.Set(x, y, img.At(x, y))
		}
	}
	p := m.Pix[0:4]
	p[0], p[1], p[2], p[3] = 255-p[0], 255-p[1], 255-p[2], 255
	var out bytes.Buffer
	if err := png.Encode(&out, m); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func sameRows(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !slicesEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

func slicesEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
