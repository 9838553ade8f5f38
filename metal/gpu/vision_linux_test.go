//go:build linux

package gpu

import (
	"math"
	"slices"
	"sort"
	"testing"
	"unsafe"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/vision"
	"github.com/lilyformac/lily/internal/goldens"
	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/plan"
)

const visionDir = "../../testdata/vision/tiny-v"

// towerTolerance bounds max |GPU row − reference| relative to the reference's largest value.
// The CPU tower sums every product in float64; vit_gemm sums in float32 on 8×8 simdgroup
// matrices and vit_attention keeps an online softmax, so the rows differ by float32 rounding
// over tiny-v's sums of 64 to 256 products: far below 1e-4 of the output's scale.
const towerTolerance = 1e-4

// tensorTowerTolerance bounds max |tensor route's row − simdgroup route's| relative to the
// largest value. The tensor route rounds each GEMM's input rows to bfloat (a relative error up
// to 2⁻⁸ per value; the weights are bfloat already and the products exact) in the 10 GEMMs of
// tiny-v's two blocks and merger, whose errors the residual stream, the GELUs and the LayerNorms
// carry to the output: measured 0.0085 to 0.0100 of the largest value over its three images,
// about 2.5 bfloat units. 2e-2 leaves twice that; a GEMM that ran wrong (a lost K step or tile,
// a missing bias or epilogue) moves the rows by their own scale.
const tensorTowerTolerance = 2e-2

// relDiff is max |got − want| over every value, and the largest |want|.
func relDiff(got [][]float32, want func(i int) []float32) (worst, scale float64) {
	for i, row := range got {
		w := want(i)
		worst = max(worst, maxAbsDiff(row, w))
		for _, v := range w {
			scale = max(scale, math.Abs(float64(v)))
		}
	}
	return worst, scale
}

// TestEncodeImageMatchesTower: on the emulator (threads shuffled, the dispatches between barriers
// in reverse), EncodeImage on transformers' pixel rows of each of tiny-v's images gives the CPU
// tower's rows and transformers' embeddings within towerTolerance of their scale; the executors
// of at most towerCacheSize grids are kept, binding one set of activations sized for the most
// patches the default pixel cap allows (the MLP's rows of the tower's width, in float32), and an
// image encoded again after its executor was dropped gives the same rows bit for bit.
func TestEncodeImageMatchesTower(t *testing.T) {
	g := goldens.MustLoadVision(t, visionDir)
	w, err := model.Load(visionDir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 32}, Threads: emu.Shuffle, GroupOrder: emu.Reverse, Seed: 7})
	defer e.Close()
	tower := vision.NewTower(w.Config.Vision, w.Vision)
	files := make([]string, 0, len(g.Images))
	for f := range g.Images {
		files = append(files, f)
	}
	sort.Strings(files)
	got := map[string][][]float32{}
	for _, f := range files {
		px := goldens.MustReferencePixels(t, g.Images[f])
		rows, err := e.EncodeImage(px)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want := tower.Encode(px)
		if len(rows) != len(want) {
			t.Fatalf("%s: %d rows, the CPU tower %d", f, len(rows), len(want))
		}
		worst, scale := relDiff(rows, func(i int) []float32 { return want[i] })
		t.Logf("%s (%d×%d patches): max |GPU − CPU tower| = %.3g (%.3g of the largest value %.3g)", f, px.GridH, px.GridW, worst, worst/scale, scale)
		if worst > towerTolerance*scale {
			t.Errorf("%s: max |GPU − CPU tower| = %.3g > %g × %.3g", f, worst, towerTolerance, scale)
		}
		got[f] = rows
	}
	if n := len(e.vit.runs); n > towerCacheSize || n == 0 {
		t.Errorf("%d tower executors kept, want 1 to %d", n, towerCacheSize)
	}
	checkSharedActivations(t, e)
	checkTransformersEmbeds(t, g, got)
	again, err := e.EncodeImage(goldens.MustReferencePixels(t, g.Images[files[0]]))
	if err != nil {
		t.Fatal(err)
	}
	for i := range again {
		if !slices.Equal(again[i], got[files[0]][i]) {
			t.Fatalf("%s encoded again: row %d differs", files[0], i)
		}
	}
}

// checkSharedActivations: every kept tower executor's MLP rows are the one buffer the device
// allocated for the most patches an image under vision.ServedMaxPixels becomes (2,560 merged
// blocks of 2×2 patches).
func checkSharedActivations(t *testing.T, e *GPU) {
	t.Helper()
	v := e.w.Config.Vision
	want := int64(vision.ServedMaxPixels/(32*32)*4) * int64(v.Intermediate) * 4
	e.dev.mu.Lock()
	size := e.dev.sharedSize["vit.mlp"]
	e.dev.mu.Unlock()
	if size != want {
		t.Errorf("shared MLP activations of %d bytes, want %d", size, want)
	}
	for _, r := range e.vit.runs {
		if got, first := unsafe.SliceData(r.x.Bytes(r.t.MLP)), unsafe.SliceData(e.vit.runs[0].x.Bytes(e.vit.runs[0].t.MLP)); got != first {
			t.Errorf("the %d×%d grid's MLP rows are not the shared buffer", r.t.GH, r.t.GW)
		}
	}
}

// checkTransformersEmbeds: each golden prompt's image rows (the GPU's, in the prompt's order)
// are transformers' embeddings within towerTolerance of their scale.
func checkTransformersEmbeds(t *testing.T, g *goldens.Vision, got map[string][][]float32) {
	t.Helper()
	H := g.HiddenSize
	for name, p := range g.Prompts {
		var rows [][]float32
		for _, f := range p.Images {
			rows = append(rows, got[f]...)
		}
		if len(rows)*H != len(p.Embeds) {
			t.Fatalf("%s: %d image rows, transformers %d", name, len(rows), len(p.Embeds)/H)
		}
		worst, scale := relDiff(rows, func(i int) []float32 { return p.Embeds[i*H : (i+1)*H] })
		t.Logf("%s: max |GPU − transformers| = %.3g (%.3g of the largest value %.3g)", name, worst, worst/scale, scale)
		if worst > towerTolerance*scale {
			t.Errorf("%s: max |GPU − transformers| = %.3g > %g × %.3g", name, worst, towerTolerance, scale)
		}
	}
}

// TestEncodeImageTensorRoute: a backend on the tensor route (forced on the emulator, which draws
// the cooperative tensors' layouts at random) runs the tower's GEMMs in vit_gemm_tensor but for
// the patch embedding's (float32 weights, vit_gemm), and gives each of tiny-v's images the
// simdgroup route's rows within tensorTowerTolerance of their scale.
func TestEncodeImageTensorRoute(t *testing.T) {
	g := goldens.MustLoadVision(t, visionDir)
	w, err := model.Load(visionDir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rows := map[plan.Route]map[string][][]float32{}
	for i, route := range []plan.Route{plan.Simdgroup, plan.Tensor} {
		forced := RouteChoice{Route: route, Forced: true}
		e := newEmu(t, w, EmuOptions{GPUOptions: GPUOptions{MaxCtx: 32, PrefillRoute: forced}, Threads: emu.Shuffle, Seed: uint64(3 + i)})
		rows[route] = map[string][][]float32{}
		for f, im := range g.Images {
			if rows[route][f], err = e.EncodeImage(goldens.MustReferencePixels(t, im)); err != nil {
				t.Fatalf("%s, %s: %v", route, f, err)
			}
		}
		if len(e.vit.runs) == 0 {
			t.Fatalf("%s: no tower executor kept", route)
		}
		for _, r := range e.vit.runs {
			checkTowerForms(t, r.t.Plan, route, w.Config.Vision.Depth)
		}
		e.Close()
	}
	for f, want := range rows[plan.Simdgroup] {
		worst, scale := relDiff(rows[plan.Tensor][f], func(i int) []float32 { return want[i] })
		t.Logf("%s: max |tensor − simdgroup route| = %.3g (%.3g of the largest value %.3g)", f, worst, worst/scale, scale)
		if worst > tensorTowerTolerance*scale {
			t.Errorf("%s: max |tensor − simdgroup route| = %.3g > %g × %.3g", f, worst, tensorTowerTolerance, scale)
		}
	}
}

// checkTowerForms: a tower plan on route runs its GEMMs — the patch embedding, four a block, the
// merger's two — in vit_gemm (simdgroup), or all but the patch embedding's in vit_gemm_tensor
// (tensor).
func checkTowerForms(t *testing.T, p *plan.Plan, route plan.Route, depth int) {
	t.Helper()
	count := map[string]int{}
	for _, d := range p.Dispatches {
		count[d.Kernel]++
	}
	want := map[string]int{"vit_gemm": 4*depth + 3}
	if route == plan.Tensor {
		want = map[string]int{"vit_gemm": 1, "vit_gemm_tensor": 4*depth + 2}
	}
	if count["vit_gemm"] != want["vit_gemm"] || count["vit_gemm_tensor"] != want["vit_gemm_tensor"] {
		t.Errorf("%s route: %d vit_gemm and %d vit_gemm_tensor, want %v", route, count["vit_gemm"], count["vit_gemm_tensor"], want)
	}
}
