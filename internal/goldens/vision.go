package goldens

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/vision"
)

// Vision is the vision-language golden (testdata/vision/tiny-v, tools/golden/gen_vision.py):
// image prompts run by transformers, with the processor's pixel rows and the tower's output.
type Vision struct {
	Dir        string
	VocabSize  int                      `json:"vocab_size"`
	HiddenSize int                      `json:"hidden_size"`
	Prompts    map[string]*VisionPrompt `json:"prompts"`
	Images     map[string]*VisionImage  `json:"images"`
	Stats      struct {
		MinGreedyTop2Gap   float64 `json:"min_greedy_top2_gap"`
		MinRouterTopKGap   float64 `json:"min_router_topk_gap"`
		MaxRouterBF16Shift float64 `json:"max_router_bf16_shift"`
		RoutingAgreesF32   bool    `json:"routing_agrees_f32"`
	} `json:"stats"`
}

// VisionPrompt is one image prompt's reference run.
type VisionPrompt struct {
	IDs         []int     `json:"ids"`    // the prompt with every image's pads expanded
	Images      []string  `json:"images"` // its images in order (file names under images/)
	Positions   [3][]int  `json:"positions"`
	RopeDelta   int       `json:"rope_delta"`
	GreedyIDs   []int     `json:"greedy_ids"`
	DecodeSteps int       `json:"decode_steps"`
	HasF64      bool      `json:"has_f64"`
	Prefill     []float32 `json:"-"` // logits at every position [ids][vocab], float32
	PrefillBF16 []float32 `json:"-"`
	PrefillF64  []float64 `json:"-"`
	Decode      []float32 `json:"-"` // logits of each greedy decode step after the prompt
	Embeds      []float32 `json:"-"` // the tower's output rows for the prompt's images, in order
}

// VisionImage is one image's preprocessing by transformers' processors.
type VisionImage struct {
	Grid       [3]int `json:"grid"` // (t, h, w) in patches
	Processors map[string]struct {
		Rows [2]int `json:"rows"`
		Cls  string `json:"cls"`
	} `json:"processors"`
	// Pixels are each processor's rows ([patches][3·2·P·P], the frame repeated), by processor
	// ("default" is the one the model ran on).
	Pixels map[string][]float32 `json:"-"`
}

// LoadVision reads the vision golden in dir.
func LoadVision(dir string) (*Vision, error) {
	data, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		return nil, err
	}
	g := &Vision{Dir: dir}
	if err := json.Unmarshal(data, g); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	for name, p := range g.Prompts {
		if err := p.read(dir, name, g.VocabSize); err != nil {
			return nil, err
		}
	}
	for file, im := range g.Images {
		im.Pixels = map[string][]float32{}
		for proc, info := range im.Processors {
			px, err := ReadF32(filepath.Join(dir, strings.TrimSuffix(file, ".png")+".pixels."+proc+".f32"))
			if err != nil {
				return nil, err
			}
			if len(px) != info.Rows[0]*info.Rows[1] {
				return nil, fmt.Errorf("%s: %s pixels of %s: %d values, expected %v", dir, proc, file, len(px), info.Rows)
			}
			im.Pixels[proc] = px
		}
	}
	return g, nil
}

func (p *VisionPrompt) read(dir, name string, V int) error {
	var err error
	f32 := func(suffix string) []float32 {
		var x []float32
		if err == nil {
			x, err = ReadF32(filepath.Join(dir, name+"."+suffix))
		}
		return x
	}
	p.Prefill, p.PrefillBF16, p.Decode, p.Embeds = f32("prefill.f32"), f32("prefill_bf16.f32"), f32("decode.f32"), f32("embeds.f32")
	if err == nil && p.HasF64 {
		p.PrefillF64, err = ReadF64(filepath.Join(dir, name+".prefill_f64.f64"))
	}
	if err != nil {
		return err
	}
	n := len(p.IDs)
	if len(p.Prefill) != n*V || len(p.PrefillBF16) != n*V || len(p.Decode) != p.DecodeSteps*V || len(p.GreedyIDs) != p.DecodeSteps+1 {
		return fmt.Errorf("%s: prompt %s: files disagree on sizes", dir, name)
	}
	for _, row := range p.Positions {
		if len(row) != n {
			return fmt.Errorf("%s: prompt %s: %d positions for %d ids", dir, name, len(row), n)
		}
	}
	return nil
}

// BF16Check holds prompt logits rows of p ([positions][vocab], a prefix of the prompt's) to the
// bfloat16 yardstick (Golden.BF16Check): fair where the golden's router gaps are RouteSafety
// times the largest shift transformers' bfloat16 run gave a router logit.
func (g *Vision) BF16Check(p *VisionPrompt, rows []float32) (mean, worst float64, errs []error) {
	s := g.Stats
	if !p.HasF64 || !s.RoutingAgreesF32 || !(s.MinRouterTopKGap >= RouteSafety*s.MaxRouterBF16Shift) {
		return 0, 0, []error{fmt.Errorf("vision golden: no float64 run, or routing not safe from bfloat16 (agrees %v, smallest top-k gap %.3g, bfloat16 shift %.3g)", s.RoutingAgreesF32, s.MinRouterTopKGap, s.MaxRouterBF16Shift)}
	}
	V := g.VocabSize
	hf := make([]float64, len(p.IDs))
	f64Row := func(i int) []float64 { return p.PrefillF64[i*V : (i+1)*V] }
	for i := range hf {
		hf[i] = MaxAbsDiff(p.PrefillBF16[i*V:(i+1)*V], f64Row(i))
	}
	return bf16Check(rows, V, hf, f64Row)
}

// MustLoadVision is LoadVision for tests: a failure ends the test.
func MustLoadVision(t testing.TB, dir string) *Vision {
	t.Helper()
	g, err := LoadVision(dir)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// FoldRow is a reference processor row, [channel][t][y][x] with the still frame repeated over
// the two temporal slots, as Lily keeps it: [channel][y][x]. The two copies must be equal.
func FoldRow(row []float32, patch int) ([]float32, error) {
	pp := patch * patch
	if len(row) != 6*pp {
		return nil, fmt.Errorf("goldens: a pixel row of %d values, expected %d", len(row), 6*pp)
	}
	out := make([]float32, 0, 3*pp)
	for c := range 3 {
		a, b := row[2*c*pp:(2*c+1)*pp], row[(2*c+1)*pp:(2*c+2)*pp]
		if !slices.Equal(a, b) {
			return nil, fmt.Errorf("goldens: the temporal copies of channel %d differ", c)
		}
		out = append(out, a...)
	}
	return out, nil
}

// ReferencePixels are transformers' (default processor's) pixel rows of the image, folded: the
// tower's input without Lily's own preprocessing.
func (im *VisionImage) ReferencePixels() (*vision.Pixels, error) {
	ref := im.Pixels["default"]
	n := im.Grid[1] * im.Grid[2]
	px := &vision.Pixels{GridH: im.Grid[1], GridW: im.Grid[2], Merge: 2}
	for i := range n {
		row, err := FoldRow(ref[i*len(ref)/n:(i+1)*len(ref)/n], 16)
		if err != nil {
			return nil, err
		}
		px.Rows = append(px.Rows, row)
	}
	return px, nil
}

// MustReferencePixels is ReferencePixels for tests: a failure ends the test.
func MustReferencePixels(t testing.TB, im *VisionImage) *vision.Pixels {
	t.Helper()
	px, err := im.ReferencePixels()
	if err != nil {
		t.Fatal(err)
	}
	return px
}
