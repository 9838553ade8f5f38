package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/gpu"
)

// TestServeMemoryDefaults: on metal, a Mac under 32 GB serves with the int8 KV cache and the
// 512-token chunk and a 1 GiB prefix cache unless --kv-bits, --prefill-chunk or --cache-mb say
// otherwise; 32 GB and up, and the other backends, keep the flags' defaults.
func TestServeMemoryDefaults(t *testing.T) {
	for _, tc := range []struct {
		name          string
		args          []string
		backend       string
		mem           int64
		kvBits, chunk int
		cacheMB       int
	}{
		{"24 GB", nil, "metal", 24 << 30, 8, gpu.ChunkMedium, 1024},
		{"24 GB, --kv-bits 16", []string{"--kv-bits", "16"}, "metal", 24 << 30, 16, gpu.ChunkMedium, 1024},
		{"24 GB, --prefill-chunk 4096", []string{"--prefill-chunk", "4096"}, "metal", 24 << 30, 8, 4096, 1024},
		{"24 GB, --cache-mb 3000", []string{"--cache-mb", "3000"}, "metal", 24 << 30, 8, gpu.ChunkMedium, 3000},
		{"32 GB", nil, "metal", 32 << 30, 16, -1, 4096},
		{"64 GB", nil, "metal", 64 << 30, 16, -1, 4096},
		{"unknown memory", nil, "metal", 0, 16, -1, 4096},
		{"24 GB, emu", nil, "emu", 24 << 30, 16, -1, 4096},
		{"24 GB, cpu", nil, "cpu", 24 << 30, 16, -1, 4096},
	} {
		cmd := newServeCmd()
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		o := serveOptions{kvBits: 16, prefillChunk: -1}
		f := cmd.Flags()
		o.kvBits, _ = f.GetInt("kv-bits")
		o.prefillChunk, _ = f.GetInt("prefill-chunk")
		o.cacheMB, _ = f.GetInt("cache-mb")
		applyMemoryDefaults(f, tc.backend, tc.mem, &o.kvBits, &o.prefillChunk, &o.cacheMB)
		if o.kvBits != tc.kvBits || o.prefillChunk != tc.chunk || o.cacheMB != tc.cacheMB {
			t.Errorf("%s: --kv-bits %d --prefill-chunk %d --cache-mb %d, want %d %d %d", tc.name, o.kvBits, o.prefillChunk, o.cacheMB, tc.kvBits, tc.chunk, tc.cacheMB)
		}
	}
}

// TestPlanContextByMacGBRaised: bench --plan reports the context after the suggested raise of
// iogpu.wired_limit_mb: at least 65,536 positions on 24 GB (with its int8 default), the full
// context on 32 GB, each limit leaving macOS at least 3 GiB; --kv-bits 16 given by hand is kept
// (and then 24 GB holds less than 65,536).
func TestPlanContextByMacGBRaised(t *testing.T) {
	plan := func(args ...string) planOutput {
		t.Helper()
		out, err := execute(t, append([]string{"bench", "--plan", "--output", "json"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var p planOutput
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return p
	}
	p := plan()
	if p.ContextByMacGB["24"] != 0 || p.KVBitsByMacGB["24"] != 8 || p.PrefillChunkByMacGB["24"] != gpu.ChunkMedium || p.KVBitsByMacGB["32"] != 16 {
		t.Fatalf("by Mac: context %v, kv bits %v, chunk %v", p.ContextByMacGB, p.KVBitsByMacGB, p.PrefillChunkByMacGB)
	}
	raised, mb := p.ContextByMacGBRaised, p.RaisedWiredLimitMB
	if len(raised) != 2 || raised["24"] < 65536 || raised["32"] != 262144 || mb["24"] != 20480 || mb["32"] != 28672 {
		t.Fatalf("raised: context %v, wired_limit_mb %v", raised, mb)
	}
	for gb, v := range mb {
		total := map[string]int{"24": 24, "32": 32}[gb] << 10
		if total-v < 3<<10 {
			t.Errorf("%s GB: a limit of %d MiB leaves macOS less than 3 GiB", gb, v)
		}
	}
	if p16 := plan("--kv-bits", "16"); p16.KVBitsByMacGB["24"] != 16 || p16.ContextByMacGBRaised["24"] >= 65536 || p16.ContextByMacGBRaised["24"] == 0 {
		t.Fatalf("--kv-bits 16: kv bits %v, raised %v", p16.KVBitsByMacGB, p16.ContextByMacGBRaised)
	}
	out, err := execute(t, "bench", "--plan")
	if err != nil || !strings.Contains(out, "after raising iogpu.wired_limit_mb: 24 GB: ") {
		t.Fatalf("text: %v\n%s", err, out)
	}
}

// TestDoctorWiredLimit: the doctor's context check with the real memory model on Macs of 24 and
// 32 GB (their memory injected): the exact command for that Mac, what it leaves macOS, that it
// lasts until a restart, and the context it gives with that Mac's serving defaults.
func TestDoctorWiredLimit(t *testing.T) {
	c := syscheck.ContextCheck(24<<30, uint64(decode.MacWorkingSet(24)), productionContext)
	if c.Status != syscheck.Fail || !strings.Contains(c.Detail, "do not fit") {
		t.Fatalf("24 GB: %+v", c)
	}
	raised, _, _ := productionContext(20<<30, 24<<30)
	want := "sudo sysctl iogpu.wired_limit_mb=20480 lets the GPU use up to 20 GB of this Mac's 24 GB and leaves macOS 4 GB; it lasts until the Mac restarts (run it again after each restart); lily serve then holds "
	if !strings.HasPrefix(c.Fix, want) || !strings.HasSuffix(c.Fix, " "+strconv.Itoa(raised)+" positions") || raised < syscheck.UsefulContext {
		t.Fatalf("24 GB fix %q (raised: %d positions)", c.Fix, raised)
	}
	c = syscheck.ContextCheck(32<<30, uint64(decode.MacWorkingSet(32)), productionContext)
	if c.Status != syscheck.Warn || !strings.HasPrefix(c.Fix, "sudo sysctl iogpu.wired_limit_mb=28672 lets the GPU use up to 28 GB of this Mac's 32 GB and leaves macOS 4 GB") || !strings.HasSuffix(c.Fix, "then holds 262144 positions") {
		t.Fatalf("32 GB: %+v", c)
	}
	if c := syscheck.ContextCheck(64<<30, uint64(decode.MacWorkingSet(64)), productionContext); c.Status != syscheck.Pass || c.Fix != "" {
		t.Fatalf("64 GB: %+v", c)
	}
	// The 24 GB Mac is sized with its own defaults (int8 KV): bfloat16 would hold less (about
	// half, each less the room made for several sequences at once: at least 1.5× as many).
	n8, _, _ := productionContext(20<<30, 24<<30)
	n16, _, _ := productionContext(20<<30, 64<<30)
	if n8 < n16*3/2 {
		t.Fatalf("20 GiB: %d positions with the 24 GB defaults, %d with the 64 GB ones", n8, n16)
	}
}
