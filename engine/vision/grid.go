package vision

import (
	"bytes"
	"fmt"
	"image"
)

// DecodeConfigLimit reads an image's size and format from its header alone, with the checks
// DecodeLimit makes before it inflates anything: a sniffed format, a non-empty size, at most
// maxPixels pixels. Counting an image's tokens needs no more than this.
func DecodeConfigLimit(data []byte, maxPixels int) (image.Config, string, error) {
	format, err := sniff(data)
	if err != nil {
		return image.Config{}, "", err
	}
	cfg, err := codecs[format].config(bytes.NewReader(data))
	if err != nil {
		return cfg, format, fmt.Errorf("vision: reading the %s header: %w", format, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return cfg, format, fmt.Errorf("vision: the %s image declares an empty %d×%d size", format, cfg.Width, cfg.Height)
	}
	if px := int64(cfg.Width) * int64(cfg.Height); px > int64(maxPixels) {
		return cfg, format, fmt.Errorf("%w: the %s image is %d×%d = %d pixels, over the limit of %d",
			ErrTooLarge, format, cfg.Width, cfg.Height, px, maxPixels)
	}
	return cfg, format, nil
}

// Grid is the patch grid (rows, columns) a width×height image becomes under p: the smart size
// divided by the patch size, as FromRGB would cut it, without resizing anything.
func (p Processor) Grid(width, height int) (gh, gw int, err error) {
	if err := p.validate(); err != nil {
		return 0, 0, err
	}
	h, w, err := SmartResize(height, width, p.PatchSize*p.Merge, p.MinPixels, p.MaxPixels)
	if err != nil {
		return 0, 0, err
	}
	return h / p.PatchSize, w / p.PatchSize, nil
}

// Tokens is the number of prompt tokens a width×height image becomes under p (Pixels.Tokens of
// its preprocessed pixels).
func (p Processor) Tokens(width, height int) (int, error) {
	gh, gw, err := p.Grid(width, height)
	if err != nil {
		return 0, err
	}
	return gh * gw / (p.Merge * p.Merge), nil
}
