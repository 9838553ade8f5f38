package main

import (
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/metal/gpu"
)

// TestVisionFlag: --vision defaults to auto and takes auto, on and off; anything else is an
// error naming the three.
func TestVisionFlag(t *testing.T) {
	cmd := newServeCmd()
	if def := cmd.Flags().Lookup("vision").DefValue; def != "auto" {
		t.Fatalf("--vision defaults to %q", def)
	}
	for _, v := range []string{"auto", "on", "off", ""} {
		if err := (imageOptions{vision: v}).check(); err != nil {
			t.Errorf("--vision %q: %v", v, err)
		}
	}
	if err := (imageOptions{vision: "yes"}).check(); err == nil || !strings.Contains(err.Error(), "expected auto, on or off") {
		t.Errorf("--vision yes: %v", err)
	}
}

// TestVisionOff: --vision off leaves the tower out, on keeps it; auto keeps it on the emulator,
// on metal on a 64 GB Mac and on one of unknown memory, and leaves it out on metal on a 24 GB
// Mac with its serving defaults (gpu.AutoVision), saying so; a checkpoint without a tower has
// nothing to leave out.
func TestVisionOff(t *testing.T) {
	c := config.Production()
	o := func(vision string, mem int64) backendOptions {
		d := gpu.DefaultsFor(mem)
		return backendOptions{vision: vision, kvBits: d.KVBits, prefillChunk: d.PrefillChunk, cacheBytes: int64(d.CacheMB) << 20}
	}
	for _, tc := range []struct {
		name, backend, vision string
		mem                   int64
		want                  string // a prefix of why; "": the tower is loaded
	}{
		{"off", "metal", "off", 64 << 30, "vision is off (--vision off)"},
		{"off, emu", "emu", "off", 0, "vision is off (--vision off)"},
		{"on, 24 GB", "metal", "on", 24 << 30, ""},
		{"auto, 24 GB", "metal", "auto", 24 << 30, "vision is off on this 24 GB Mac"},
		{"default, 24 GB", "metal", "", 24 << 30, "vision is off on this 24 GB Mac"},
		{"auto, 64 GB", "metal", "auto", 64 << 30, ""},
		{"auto, unknown memory", "metal", "auto", 0, ""},
		{"auto, emu", "emu", "auto", 24 << 30, ""},
	} {
		got := visionOff(tc.backend, o(tc.vision, tc.mem), c, tc.mem)
		if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	text := config.Production()
	text.Vision = nil
	if got := visionOff("metal", o("auto", 24<<30), text, 24<<30); got != "" {
		t.Errorf("no tower: %q", got)
	}
}
