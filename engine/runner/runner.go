// Package runner is Lily's one engine loop: it runs the sequences of every admitted request on a
// backend, one step at a time — a decode row per running sequence and a bounded slice of one
// prompt's prefill — applying each request's sampling, steering, stops, limits and cancellation
// in one place, and reuses cached prompt prefixes (engine/prefixcache's snapshots of the KV cache
// and DeltaNet state).
package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/prefixcache"
	"github.com/lilyformac/lily/engine/sample"
)

// Request is one generation.
type Request struct {
	Prompt    []int
	Images    []Image // the encoded images among Prompt's tokens, in order
	MaxTokens int
	Sampling  sample.Params
	StopIDs   []int                 // generation ends after one of these ids (it is reported)
	Progress  func(done, total int) // called between prefill slices (keep-alives, status)
	NoCache   bool                  // neither read nor write the prefix cache
	// Checkpoints are prompt lengths after which the prefill saves its state in the prefix cache,
	// besides the prompt's end and every Options.CheckpointEvery tokens: where a later request
	// is likely to diverge from this one (the end of the conversation before the generation
	// prompt, the end of the system prompt).
	Checkpoints []int
	// OnLogits, when set, sees each logits row a token is chosen from, before the choice (step 0
	// is the prompt's last row). It runs on the engine loop: keep it short.
	OnLogits func(step int, row []float32) error
	// Steer, when set, shapes the generation token by token (a thinking budget, constrained
	// decoding); a steered generation samples on the host. It runs on the engine loop.
	Steer Steer
}

// Image is an encoded image in a request's prompt: its pad tokens are Prompt[At : At+H·W].
type Image struct {
	backend.Image
	// ID names the image's pixels (a hash of its bytes): the prefix cache keys its pad tokens by
	// it, so a prompt with other pixels at the same place never matches.
	ID uint64
}

// Steer shapes a generation token by token.
type Steer interface {
	// Next says what the next token may be: forced (ok), else any token in allowed, a bitset over
	// ids (nil: any token).
	Next() (forced int, ok bool, allowed []uint64)
	// Accept is told each token generated, forced or chosen; an error ends the generation.
	Accept(id int) error
}

// Token is one generated token.
type Token struct {
	ID      int
	Logprob float32
	Top     []sample.Candidate
}

// Result summarises a finished generation.
type Result struct {
	Tokens       []int
	FinishReason string // "stop" (stop id or the caller asked to stop) or "length"
	PromptTokens int
	CachedTokens int           // prompt tokens served from the prefix cache
	Queued       time.Duration // waiting for a place among the running sequences
	Prefill      time.Duration
	Decode       time.Duration
}

// Runner owns a backend, its prefix cache and the engine loop. Up to Options.Parallel sequences
// run at once; later requests wait in arrival order.
type Runner struct {
	b         backend.Backend
	cache     *prefixcache.Cache
	slice     int // prompt tokens per step
	every     int // checkpoint spacing inside long prefills (0: none)
	parallel  int
	hold      func(string) func()
	disk      *prefixcache.Disk
	codec     backend.Persistent // the backend, when it can write snapshots to disk
	ctxLength int
	release   func()    // the hold's, while sequences run (the loop's)
	drafts    *drafting // nil: drafting off

	mu       sync.Mutex
	arrivals []*seq // submitted, not yet running, in arrival order
	looping  bool   // the loop goroutine runs
	waiting  atomic.Int32
	running  atomic.Int32
}

// Options tune a runner.
type Options struct {
	CacheBytes int64 // prefix-cache budget (0 disables the cache)
	// PrefillSlice is the prompt tokens a step takes (running streams wait at most that long),
	// rounded up to whole batches of a backend that prefills in batches (default: the backend's
	// Description.PrefillSlice, a size its batched prefill runs whole, else 256).
	PrefillSlice int
	// Parallel is how many sequences run at once (default 1); more requests wait their turn.
	Parallel int
	Context  int // maximum positions per sequence (default: the model's)
	// CheckpointEvery saves the prefill's state every this many prompt tokens (default 4,096;
	// negative: never), so a prompt edited in the middle of a long history re-prefills only
	// from the last checkpoint before the edit.
	CheckpointEvery int
	// Disk, when set, is the prefix cache's tier on disk (see Disk); it is used only with a
	// backend that implements backend.Persistent.
	Disk *prefixcache.Disk
	// Hold, when set, is called when the loop starts running sequences; the function it returns
	// when none is left. lily passes mtl.BeginActivity: macOS keeps GPU clocks up and the Mac
	// awake only while something generates.
	Hold func(reason string) (release func())
	// Drafts configure speculative decoding (auto by default).
	Drafts DraftOptions
}

// DefaultCheckpointEvery is Options.CheckpointEvery's default.
const DefaultCheckpointEvery = 4096

// New returns a runner over b.
func New(b backend.Backend, o Options) *Runner {
	switch d := b.Describe(); {
	case o.PrefillSlice > 0:
		// A backend that prefills in batches of n tokens gets whole batches: the rest of a slice
		// would go through its one-token step.
		if n := d.PrefillChunk(); n > 0 {
			o.PrefillSlice = (o.PrefillSlice + n - 1) / n * n
		}
	case d.PrefillSlice > 0:
		o.PrefillSlice = d.PrefillSlice
	default:
		o.PrefillSlice = 256
	}
	if o.Context <= 0 {
		o.Context = b.Config().MaxPositions
	}
	switch {
	case o.CheckpointEvery == 0:
		o.CheckpointEvery = DefaultCheckpointEvery
	case o.CheckpointEvery < 0:
		o.CheckpointEvery = 0
	}
	r := &Runner{b: b, cache: prefixcache.NewCache(o.CacheBytes), slice: o.PrefillSlice, every: o.CheckpointEvery, parallel: max(o.Parallel, 1), ctxLength: o.Context, hold: o.Hold,
		drafts: newDrafting(o.Drafts, b.Describe())}
	if codec, ok := b.(backend.Persistent); ok && o.Disk != nil {
		r.disk, r.codec = o.Disk, codec
	}
	return r
}

// Context is the maximum number of positions (prompt + generated) per request.
func (r *Runner) Context() int { return r.ctxLength }

// Parallel is how many sequences run at once.
func (r *Runner) Parallel() int { return r.parallel }

// Batched is how many of the backend's steps ran several sequences' rows at once, and the rows
// they ran (none on a backend that runs rows one after another).
func (r *Runner) Batched() (steps, rows int64) { return r.b.Batched() }

// Load is the number of running sequences and of requests waiting for a place among them.
func (r *Runner) Load() (running, waiting int) {
	return int(r.running.Load()), int(r.waiting.Load())
}

// Cache exposes the prefix cache (for metrics).
func (r *Runner) Cache() *prefixcache.Cache { return r.cache }

// Disk exposes the prefix cache's disk tier, or nil (for metrics).
func (r *Runner) Disk() *prefixcache.Disk { return r.disk }

// Generate runs req, calling emit for each token. emit returning stop=true ends the generation
// with finish reason "stop"; an error from emit or a cancelled ctx ends it with that error. emit
// runs on the caller's goroutine, so a slow client never holds up the other sequences.
func (r *Runner) Generate(ctx context.Context, req Request, emit func(Token) (stop bool, err error)) (Result, error) {
	if err := r.check(req); err != nil {
		return Result{PromptTokens: len(req.Prompt)}, err
	}
	s := newSeq(ctx, req)
	r.submit(s)
	return s.deliver(r, emit)
}

func (r *Runner) check(req Request) error {
	if len(req.Prompt) == 0 {
		return errors.New("runner: empty prompt")
	}
	if req.MaxTokens < 1 {
		return fmt.Errorf("runner: max tokens must be at least 1, got %d", req.MaxTokens)
	}
	if r.ctxLength > 0 && len(req.Prompt)+req.MaxTokens > r.ctxLength {
		return fmt.Errorf("runner: %d prompt + %d new tokens exceed the context of %d", len(req.Prompt), req.MaxTokens, r.ctxLength)
	}
	if err := r.checkImages(req); err != nil {
		return err
	}
	return req.Sampling.Validate()
}

// withdraw takes s out of the arrivals if it is still there (false: the loop has admitted it).
func (r *Runner) withdraw(s *seq) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(r.arrivals, s)
	if i < 0 {
		return false
	}
	r.arrivals = slices.Delete(r.arrivals, i, i+1)
	r.waiting.Add(-1)
	return true
}

// submit queues s and starts the loop when it is not running.
func (r *Runner) submit(s *seq) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.arrivals = append(r.arrivals, s)
	r.waiting.Add(1)
	if !r.looping {
		r.looping = true
		go r.loop()
	}
}
