package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/vision"
)

// benchImageOutput is `lily bench --image FILE --output json`.
type benchImageOutput struct {
	Backend string `json:"backend"`
	Image   struct {
		Source        [2]int  `json:"source_px"` // width, height as sent
		Resized       [2]int  `json:"resized_px"`
		Patches       int     `json:"patches"`
		Tokens        int     `json:"tokens"`
		PreprocessS   float64 `json:"preprocess_s"` // decoding, resizing, patch rows
		EncodeS       float64 `json:"encode_s"`     // the vision tower
		PrefillTokens int     `json:"prefill_tokens"`
		PrefillS      float64 `json:"prefill_s"`
		TTFTS         float64 `json:"ttft_s"` // preprocess + encode + prefill to the first token
	} `json:"image"`
}

// runBenchImage measures an image's way to the first token: preprocessing, the tower, and the
// prefill of a prompt holding it (vision start, its tokens, vision end, a question), uncached.
func runBenchImage(cmd *cobra.Command, o benchOptions) error {
	data, err := os.ReadFile(o.image)
	if err != nil {
		return fmt.Errorf("--image: %w", err)
	}
	b, cfg, closeBackend, err := openBackend(o.backend, o.model, backendOptions{kvBits: o.kvBits, prefillChunk: o.prefillChunk, prefillRoute: o.prefillRoute})
	if err != nil {
		return err
	}
	defer closeBackend()
	if d := b.Describe(); !d.Vision {
		return fmt.Errorf("--image: this model cannot see images on backend %s: %s", o.backend, d.VisionWhy)
	}
	proc, err := vision.LoadProcessor(o.model, cfg.Vision)
	if err != nil {
		return err
	}
	var out benchImageOutput
	out.Backend = o.backend
	im := &out.Image
	start := time.Now()
	img, _, err := vision.Decode(data)
	if err != nil {
		return fmt.Errorf("--image: %w", err)
	}
	px, err := proc.Pixels(img)
	if err != nil {
		return fmt.Errorf("--image: %w", err)
	}
	im.PreprocessS = time.Since(start).Seconds()
	im.Source = [2]int{img.Bounds().Dx(), img.Bounds().Dy()}
	im.Resized = [2]int{px.GridW * proc.PatchSize, px.GridH * proc.PatchSize}
	im.Patches, im.Tokens = len(px.Rows), px.Tokens()
	t := time.Now()
	rows, err := b.EncodeImage(px)
	if err != nil {
		return err
	}
	im.EncodeS = time.Since(t).Seconds()
	prompt, placed := imagePrompt(cfg, px, rows)
	r := runner.New(b, runner.Options{CheckpointEvery: -1})
	res, err := r.Generate(cmd.Context(), runner.Request{Prompt: prompt, Images: placed, MaxTokens: 1, NoCache: true},
		func(runner.Token) (bool, error) { return false, nil })
	if err != nil {
		return err
	}
	im.PrefillTokens, im.PrefillS = len(prompt), res.Prefill.Seconds()
	im.TTFTS = im.PreprocessS + im.EncodeS + im.PrefillS
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "backend %s  image %d×%d → %d×%d: %d patches, %d tokens\npreprocess %.3f s  tower %.3f s  prefill %d tokens %.3f s  first token after %.3f s\n",
		out.Backend, im.Source[0], im.Source[1], im.Resized[0], im.Resized[1], im.Patches, im.Tokens, im.PreprocessS, im.EncodeS, im.PrefillTokens, im.PrefillS, im.TTFTS)
	return err
}

// imagePrompt is a prompt holding one image: vision start, its tokens, vision end and 16 tokens
// of text.
func imagePrompt(cfg *config.Config, px *vision.Pixels, rows [][]float32) ([]int, []runner.Image) {
	v := cfg.Vision
	prompt := []int{v.StartToken}
	for range px.Tokens() {
		prompt = append(prompt, v.ImageToken)
	}
	prompt = append(append(prompt, v.EndToken), benchPrompt(16, cfg.VocabSize)...)
	placed := runner.Image{ID: 1}
	placed.At, placed.H, placed.W, placed.Embeds = 1, px.MergedH(), px.MergedW(), rows
	return prompt, []runner.Image{placed}
}
