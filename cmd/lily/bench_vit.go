package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/vision"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/metal/vit"
)

// imagePlanOutput is `lily bench --plan --image WxH --output json`: the production vision tower's
// plan for the image's grid, modeled per chip.
type imagePlanOutput struct {
	Image struct {
		Width      int     `json:"width"`
		Height     int     `json:"height"`
		Patches    int     `json:"patches"`
		Tokens     int     `json:"tokens"`
		FLOPs      float64 `json:"flops"`
		IdealFLOPs float64 `json:"ideal_flops"`
		Bytes      int64   `json:"bytes"`
		IdealBytes int64   `json:"ideal_bytes"`
		// ModeledS is each chip's time for the tower (plan.Chip.Time) on its route (imageRoute),
		// Route that route and PeakTFLOPs its peak matrix throughput there. The other figures are
		// the simdgroup route's plan.
		ModeledS   map[string]float64 `json:"modeled_s"`
		Route      map[string]string  `json:"route"`
		PeakTFLOPs map[string]float64 `json:"peak_tflops"`
		// TensorFallbacks are the tensor route's GEMMs that keep vit_gemm, by kernel and why (the
		// patch embedding's float32 weights).
		TensorFallbacks []string `json:"tensor_fallbacks,omitempty"`
	} `json:"image"`
}

// parseImageSize reads --image's WxH under --plan.
func parseImageSize(s string) (w, h int, err error) {
	ws, hs, ok := strings.Cut(strings.ToLower(s), "x")
	if ok {
		w, err = strconv.Atoi(ws)
		if err == nil {
			h, err = strconv.Atoi(hs)
		}
	}
	if !ok || err != nil || w < 1 || h < 1 {
		return 0, 0, fmt.Errorf("--image %q: with --plan, expected an image size WxH in pixels (e.g. 1024x768)", s)
	}
	return w, h, nil
}

// runBenchPlanImage models the production tower on a W×H image: the grid the production
// processor's smart resize gives it, the tower's plan for that grid on either route, and its time
// per chip of prefillChips on the chip's route.
func runBenchPlanImage(cmd *cobra.Command, o benchOptions) error {
	w, h, err := parseImageSize(o.image)
	if err != nil {
		return err
	}
	v := config.ProductionVision()
	gh, gw, err := vision.NewProcessor(v).Grid(w, h)
	if err != nil {
		return err
	}
	c, err := vit.CostOf(v, gh, gw, plan.Simdgroup)
	if err != nil {
		return err
	}
	t, err := vit.CostOf(v, gh, gw, plan.Tensor)
	if err != nil {
		return err
	}
	var out imagePlanOutput
	q := &out.Image
	q.Width, q.Height, q.Patches, q.Tokens = w, h, c.Patches, c.Tokens
	q.FLOPs, q.IdealFLOPs, q.Bytes, q.IdealBytes = c.FLOPs, c.IdealFLOPs, c.Bytes, c.IdealBytes
	q.ModeledS, q.Route, q.PeakTFLOPs = map[string]float64{}, map[string]string{}, map[string]float64{}
	q.TensorFallbacks = t.Fallbacks
	for _, chip := range prefillChips {
		cost := imageRoute(chip, c, t)
		s, err := chip.Time(cost.Work())
		if err != nil {
			return err
		}
		q.ModeledS[chip.Name] = math.Round(s*1e4) / 1e4
		q.Route[chip.Name] = cost.Route.String()
		q.PeakTFLOPs[chip.Name] = math.Round(chip.Peak(cost.Route)/1e11) / 10
	}
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	wr := cmd.OutOrStdout()
	fmt.Fprintf(wr, "vision tower (Qwen3.6-35B-A3B) on a %d×%d image: %d×%d patches (%d), %d tokens\nFLOPs %.4g  ideal %.4g  ratio %.4f\nbytes %d  ideal %d  ratio %.4f\nmodeled seconds (route, peak TFLOP/s):",
		w, h, gh, gw, q.Patches, q.Tokens, q.FLOPs, q.IdealFLOPs, q.FLOPs/q.IdealFLOPs, q.Bytes, q.IdealBytes, float64(q.Bytes)/float64(q.IdealBytes))
	for _, chip := range prefillChips {
		fmt.Fprintf(wr, " %s %.3f (%s, %.3g)", chip.Name, q.ModeledS[chip.Name], q.Route[chip.Name], q.PeakTFLOPs[chip.Name])
	}
	fmt.Fprintln(wr)
	for _, f := range q.TensorFallbacks {
		fmt.Fprintf(wr, "tensor route keeps the simdgroup form: %s\n", f)
	}
	return nil
}

// imageRoute is the tower's cost on the route chip takes, as prefillRoute picks the prefill
// chunk's: the tensor route's (tensor) where the chip has neural accelerators and that plan puts
// FLOPs on them, else the simdgroup route's (simd).
func imageRoute(chip plan.Chip, simd, tensor vit.Cost) vit.Cost {
	if chip.HasTensorOps() && tensor.TensorFLOPs > 0 {
		return tensor
	}
	return simd
}
