package gpu

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/plan"
)

// countingDevice is a device that runs nothing (every step "succeeds" and leaves the buffers as
// they are) and counts the memory it has handed out and not had back: the lifecycle of sessions,
// snapshots and executors without the cost of running kernels.
type countingDevice struct {
	mu   sync.Mutex
	live map[*[]byte]int64
}

type countedMemory struct{ b *[]byte }

func (m countedMemory) Bytes() []byte { return *m.b }

func (d *countingDevice) Alloc(b plan.Buffer) (exec.Memory, error) {
	buf := make([]byte, b.Size)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.live == nil {
		d.live = map[*[]byte]int64{}
	}
	d.live[&buf] = b.Size
	return countedMemory{&buf}, nil
}

func (d *countingDevice) Free(m exec.Memory) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cm := m.(countedMemory)
	if _, ok := d.live[cm.b]; !ok {
		panic("free of memory not allocated, or freed twice")
	}
	delete(d.live, cm.b)
}

func (d *countingDevice) held() (int, int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, s := range d.live {
		n += s
	}
	return len(d.live), n
}

type nopPipeline struct{}

func (nopPipeline) MaxThreads() int { return 1024 }

func (d *countingDevice) Pipeline(string, map[int]any) (exec.Pipeline, error) {
	return nopPipeline{}, nil
}
func (d *countingDevice) Encode(f func())              { f() }
func (d *countingDevice) Begin() (exec.Encoder, error) { return nopEncoder{}, nil }

type nopEncoder struct{}

func (nopEncoder) SetPipeline(exec.Pipeline)         {}
func (nopEncoder) SetBuffer(exec.Memory, int64, int) {}
func (nopEncoder) SetThreadgroupMemory(int, int)     {}
func (nopEncoder) Dispatch([3]int, [3]int)           {}
func (nopEncoder) Barrier()                          {}
func (nopEncoder) Commit()                           {}
func (nopEncoder) Wait() error                       { return nil }
func (nopEncoder) Finish() error                     { return nil }

// TestMemoryReturnsAfterMixedRequests: 200 requests through the engine loop, four running at
// once — shared prefixes, cache hits, evictions under a small budget, cancellations before
// admission, during prefill and after a token, uncached and sampled ones — leave the device with
// what it had before (the weights, the KV pool, the shared scratch and one idle executor), every
// KV page held by a cached snapshot or free (none once the cache is cleared), and closing the
// backend gives everything back.
func TestMemoryReturnsAfterMixedRequests(t *testing.T) {
	w, err := model.Load("../../testdata/golden/tiny-a")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	dev := &countingDevice{}
	e, err := NewGPU("counted", w, dev, GPUOptions{MaxCtx: 48, Parallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	baseBufs, baseBytes := e.Live()
	devBufs, devBytes := dev.held()
	mem, _ := decode.MemoryOf(w.Config, 0)
	r := runner.New(e, runner.Options{CacheBytes: 3 * mem.Snapshot(16), PrefillSlice: 5, CheckpointEvery: 8, Parallel: 4})
	seed := uint64(1)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		prompt := []int{11, 22, 33, 44, 55, 66, 77}[:3+i%5]
		for k := range i % 7 {
			prompt = append(prompt, 100+(i*7+k*13)%400)
		}
		// OnLogits keeps every choice on the host: the device runs nothing, so the device's own
		// loop, which reads back what its kernels wrote, cannot run on it.
		req := runner.Request{Prompt: prompt, MaxTokens: 1 + i%3, NoCache: i%11 == 0, Checkpoints: []int{len(prompt) - 1},
			OnLogits: func(int, []float32) error { return nil }}
		if i%4 == 1 {
			req.Sampling = sample.Params{Temperature: 0.7, TopK: 10, Seed: &seed}
		}
		ctx, cancel := context.WithCancel(context.Background())
		if i%13 == 6 {
			time.AfterFunc(time.Duration(i%5)*time.Millisecond, cancel) // before admission or mid-prefill
		}
		wg.Go(func() {
			defer cancel()
			emitted := 0
			_, err := r.Generate(ctx, req, func(runner.Token) (bool, error) {
				if emitted++; i%9 == 4 {
					cancel() // the client went away after the first token
				}
				return false, nil
			})
			if err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
			}
		})
		if i%8 == 7 {
			wg.Wait() // waves of eight: some wait for a place, the next wave reuses the cache
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := r.Cache().Stats()
	if st.Hits == 0 || st.Evictions == 0 {
		t.Fatalf("cache stats %+v: the mix should hit and evict", st)
	}
	if n, b := e.Live(); n != baseBufs || b != baseBytes {
		t.Fatalf("after 200 requests the backend holds %d buffers (%d bytes) beside the weights; before, %d (%d)", n, b, baseBufs, baseBytes)
	}
	if n, b := dev.held(); n != devBufs || b != devBytes {
		t.Fatalf("after 200 requests the device has %d buffers (%d bytes) out; before, %d (%d)", n, b, devBufs, devBytes)
	}
	if e.PagesInUse() > st.Entries*e.Step().Attn.TableLen() {
		t.Fatalf("%d KV pages in use with no live session and %d cached snapshots", e.PagesInUse(), st.Entries)
	}
	r.Cache().Clear()
	if n := e.PagesInUse(); n != 0 {
		t.Fatalf("%d KV pages in use after the cache was cleared", n)
	}
	e.Close()
	if n, b := dev.held(); n != 0 || b != 0 {
		t.Fatalf("after Close the device still has %d buffers (%d bytes) out", n, b)
	}
	t.Logf("200 requests in %v; cache %+v", time.Since(start), st)
}

// TestFitsCountsPages: sequences fit while their pages, each with a spare, are within the pool.
func TestFitsCountsPages(t *testing.T) {
	w, err := model.Load("../../testdata/golden/tiny-a")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e, err := NewGPU("counted", w, &countingDevice{}, GPUOptions{MaxCtx: 48, PageSize: 16, Pages: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, tc := range []struct {
		positions []int
		want      bool
	}{
		{[]int{48}, true},          // 3 pages + a spare
		{[]int{48, 48}, true},      // 8
		{[]int{48, 48, 1}, true},   // 10
		{[]int{48, 48, 17}, false}, // 11
		{[]int{16, 16, 16, 16, 16}, true},
		{[]int{16, 16, 16, 16, 16, 1}, false},
	} {
		if got := e.Fits(tc.positions); got != tc.want {
			t.Errorf("Fits(%v) = %v, want %v", tc.positions, got, tc.want)
		}
	}
}
