package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/images"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/vision"
)

// imageOptions are serve's image settings (zero values: the defaults).
type imageOptions struct {
	vision    string // "auto" (or ""), "on" or "off" (visionOff)
	maxPixels int    // 0: vision.ServedMaxPixels
	urls      bool
	cacheMB   int
}

func (o *imageOptions) flags(f *pflag.FlagSet) {
	f.StringVar(&o.vision, "vision", "auto", "on: images in prompts are seen through the model's vision tower, whose GPU memory comes out of the context; off: the tower is not loaded and images become a text placeholder; auto: on, except on metal on a Mac under 32 GB where the tower would take more than a quarter of the context (a 24 GB Mac: all of it), which /status's vision_note then says")
	f.IntVar(&o.maxPixels, "image-max-pixels", vision.ServedMaxPixels, "the most pixels of an image the model sees: larger ones are downscaled to fit (the model's own limit is 16,777,216)")
	f.BoolVar(&o.urls, "image-urls", false, "fetch images given by http(s) URL (off: such an image becomes a placeholder; data URLs always work)")
	f.IntVar(&o.cacheMB, "image-cache-mb", 256, "memory for encoded images, so an image sent again (agents resend every screenshot) is not encoded again")
}

func (o imageOptions) check() error {
	switch {
	case o.vision != "" && o.vision != "auto" && o.vision != "on" && o.vision != "off":
		return fmt.Errorf("--vision %q: expected auto, on or off", o.vision)
	case o.maxPixels != 0 && o.maxPixels < 32*32:
		return fmt.Errorf("--image-max-pixels %d: expected at least 1024", o.maxPixels)
	case o.cacheMB < 0:
		return fmt.Errorf("--image-cache-mb %d: expected 0 or more", o.cacheMB)
	}
	return nil
}

// encoder is the image encoder of b's model in dir, or nil with the reason images cannot be seen:
// first why the tower was left out (cfg.VisionOff: --vision off, auto's choice, none in the
// checkpoint), then why the backend cannot run it.
func (o imageOptions) encoder(dir string, cfg *config.Config, b backend.Backend) (*images.Encoder, string) {
	if why := noImages(cfg, b); why != "" {
		return nil, why
	}
	proc, err := vision.LoadProcessor(dir, cfg.Vision)
	if err != nil {
		log.Printf("serve: images off: %v", err)
		return nil, "the checkpoint's image processor: " + strings.TrimSpace(err.Error())
	}
	return images.NewEncoder(b, proc.WithMaxPixels(cmp.Or(o.maxPixels, vision.ServedMaxPixels)), images.Options{AllowURLs: o.urls, CacheBytes: int64(o.cacheMB) << 20}), ""
}

// noImages is why b's model (configured as cfg) sees no images, "" where it does: the tower left
// out (cfg.VisionOff) before the backend's reason.
func noImages(cfg *config.Config, b backend.Backend) string {
	d := b.Describe()
	switch {
	case d.Vision:
		return ""
	case cfg.Vision == nil && cfg.VisionOff != "":
		return cfg.VisionOff
	}
	return d.VisionWhy
}

// runImages encodes run's --image files and expands the prompt's image pads (one per file, in
// order) to their tokens.
func runImages(ctx context.Context, dir string, cfg *config.Config, b backend.Backend, prompt []int, files []string) ([]int, []runner.Image, error) {
	if len(files) == 0 {
		return prompt, nil, nil
	}
	if why := noImages(cfg, b); why != "" {
		return nil, nil, fmt.Errorf("--image: this model cannot see images here: %s", why)
	}
	proc, err := vision.LoadProcessor(dir, cfg.Vision)
	if err != nil {
		return nil, nil, fmt.Errorf("--image: %w", err)
	}
	enc := images.NewEncoder(b, proc, images.Options{})
	var encoded []*images.Encoded
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("--image: %w", err)
		}
		im, err := enc.EncodeBytes(ctx, data)
		if err != nil {
			return nil, nil, fmt.Errorf("--image %s: %w", f, err)
		}
		encoded = append(encoded, im)
	}
	out, placed, err := images.Expand(prompt, cfg.Vision.ImageToken, encoded)
	if err != nil {
		return nil, nil, fmt.Errorf("--image: the prompt's <|image_pad|> tokens must match the images: %w", err)
	}
	return out, placed, nil
}
