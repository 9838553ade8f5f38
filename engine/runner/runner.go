// Package runner generates tokens for one request at a time on a backend, reusing cached prompt
// prefixes (KV cache plus DeltaNet state snapshots) and sampling with the server's sampler.
package runner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/sample"
)

// Request is one generation.
type Request struct {
	Prompt    []int
	MaxTokens int
	Sampling  sample.Params
	StopIDs   []int                 // generation ends after one of these ids (it is reported)
	Progress  func(done, total int) // called between prefill chunks (keep-alives, status)
	NoCache   bool                  // neither read nor write the prefix cache
	// Checkpoints are prompt lengths after which the prefill saves its state in the prefix cache,
	// besides the prompt's end and every Options.CheckpointEvery tokens: where a later request
	// is likely to diverge from this one (the end of the conversation before the generation
	// prompt, the end of the system prompt).
	Checkpoints []int
	// OnLogits, when set, sees each logits row a token is chosen from, before the choice (step 0
	// is the prompt's last row).
	OnLogits func(step int, row []float32) error
	// Steer, when set, shapes the generation token by token (a thinking budget, constrained
	// decoding); a steered generation samples on the host.
	Steer Steer
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
	CachedTokens int // prompt tokens served from the prefix cache
	Prefill      time.Duration
	Decode       time.Duration
}

// ErrBusy is returned when Generate is called while another generation runs.
var ErrBusy = errors.New("runner: a generation is already running")

// Runner owns a backend and its prefix cache. One generation runs at a time; callers queue.
type Runner struct {
	b         backend.Backend
	cache     *Cache
	chunk     int
	every     int // checkpoint spacing inside long prefills (0: none)
	hold      func(string) func()
	disk      *Disk
	codec     backend.Persistent // the backend, when it can write snapshots to disk
	mu        sync.Mutex
	busy      bool
	ctxLength int
}

// Options tune a runner.
type Options struct {
	CacheBytes   int64 // prefix-cache budget (0 disables the cache)
	PrefillChunk int   // prompt tokens per forward call during prefill (default 256)
	Context      int   // maximum positions per sequence (default: the model's)
	// CheckpointEvery saves the prefill's state every this many prompt tokens (default 4,096;
	// negative: never), so a prompt edited in the middle of a long history re-prefills only
	// from the last checkpoint before the edit.
	CheckpointEvery int
	// Disk, when set, is the prefix cache's tier on disk (see Disk); it is used only with a
	// backend that implements backend.Persistent.
	Disk *Disk
	// Hold, when set, is called as each generation starts; the function it returns when it ends.
	// lily passes mtl.BeginActivity: macOS keeps GPU clocks up and the Mac awake only while
	// something generates.
	Hold func(reason string) (release func())
}

// DefaultCheckpointEvery is Options.CheckpointEvery's default.
const DefaultCheckpointEvery = 4096

// New returns a runner over b.
func New(b backend.Backend, o Options) *Runner {
	if o.PrefillChunk <= 0 {
		o.PrefillChunk = 256
	}
	// A backend that prefills in batches of n tokens gets whole batches: the rest of a call would
	// go through its one-token step.
	if c, ok := b.(interface{ PrefillChunk() int }); ok && c.PrefillChunk() > 0 {
		n := c.PrefillChunk()
		o.PrefillChunk = (o.PrefillChunk + n - 1) / n * n
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
	r := &Runner{b: b, cache: NewCache(o.CacheBytes), chunk: o.PrefillChunk, every: o.CheckpointEvery, ctxLength: o.Context, hold: o.Hold}
	if codec, ok := b.(backend.Persistent); ok && o.Disk != nil {
		r.disk, r.codec = o.Disk, codec
	}
	return r
}

// Context is the maximum number of positions (prompt + generated) per request.
func (r *Runner) Context() int { return r.ctxLength }

// Cache exposes the prefix cache (for metrics).
func (r *Runner) Cache() *Cache { return r.cache }

// Disk exposes the prefix cache's disk tier, or nil (for metrics).
func (r *Runner) Disk() *Disk { return r.disk }

// Generate runs req, calling emit for each token. emit returning stop=true ends the generation
// with finish reason "stop"; an error from emit or a cancelled ctx ends it with that error.
func (r *Runner) Generate(ctx context.Context, req Request, emit func(Token) (stop bool, err error)) (Result, error) {
	r.mu.Lock()
	if r.busy {
		r.mu.Unlock()
		return Result{}, ErrBusy
	}
	r.busy = true
	r.mu.Unlock()
	defer func() { r.mu.Lock(); r.busy = false; r.mu.Unlock() }()
	if r.hold != nil {
		defer r.hold("Lily is generating text")()
	}

	res := Result{PromptTokens: len(req.Prompt)}
	if err := r.check(req); err != nil {
		return res, err
	}
	start := time.Now()
	sess, logits, err := r.prefill(ctx, req, &res)
	if err != nil {
		return res, err
	}
	defer sess.Close()
	res.Prefill = time.Since(start)
	start = time.Now()
	seq, logits, err := r.decode(ctx, req, sess, logits, &res, emit)
	res.Decode = time.Since(start)
	if err != nil {
		return res, err
	}
	// Cache the state the session ends in (prompt + what it consumed of the generation), so a
	// follow-up request that repeats this conversation skips it.
	if len(res.Tokens) > 1 {
		r.save(req, seq, sess, logits, true)
	}
	return res, nil
}

// save stores the state of sess, which has consumed tokens, in the prefix cache (unless the
// request opts out or the cache holds that state already), and with persist on disk too. A
// failed save only costs the entry.
func (r *Runner) save(req Request, tokens []int, sess backend.Session, logits []float32, persist bool) {
	if req.NoCache {
		return
	}
	toDisk := persist && r.disk != nil && r.disk.wants(tokens)
	if !r.cache.Wants(tokens) && !toDisk {
		return
	}
	snap, err := sess.Save()
	if err != nil {
		return
	}
	if toDisk {
		if data, err := r.codec.EncodeSnapshot(snap); err == nil {
			r.disk.put(tokens, data, logits)
		}
	}
	if r.cache.Wants(tokens) {
		r.cache.Store(tokens, snap, logits)
	} else {
		snap.Close()
	}
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
	return req.Sampling.Validate()
}

// prefill brings a session to the end of the prompt, from the longest cached prefix, saving
// its state at each checkpoint on the way. It returns the session (which the caller closes) and
// the last logits row.
func (r *Runner) prefill(ctx context.Context, req Request, res *Result) (sess backend.Session, logits []float32, err error) {
	started, logits, err := r.start(req, res)
	if err != nil {
		return nil, nil, err
	}
	sess = started
	defer func() {
		if err != nil { // the returns below set sess to nil: close the one started
			started.Close()
		}
	}()
	marks := r.marks(req, res.CachedTokens)
	for done := res.CachedTokens; done < len(req.Prompt); {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		end := min(done+r.chunk, len(req.Prompt))
		if len(marks) > 0 {
			end = min(end, marks[0])
		}
		rows, err := sess.Forward(req.Prompt[done:end], false)
		if err != nil {
			return nil, nil, err
		}
		logits, done = rows[0], end
		if len(marks) > 0 && marks[0] == done {
			marks = marks[1:]
			r.save(req, req.Prompt[:done], sess, logits, slices.Contains(req.Checkpoints, done))
		}
		if req.Progress != nil {
			req.Progress(done, len(req.Prompt))
		}
	}
	if res.CachedTokens < len(req.Prompt) {
		r.save(req, req.Prompt, sess, logits, false)
	}
	return sess, logits, nil
}

// start restores the longest cached prefix of the prompt, from memory or from disk, or starts an
// empty session.
func (r *Runner) start(req Request, res *Result) (backend.Session, []float32, error) {
	hit, fromDisk := r.lookup(req)
	if hit == nil {
		return r.b.NewSession(), nil, nil
	}
	sess, err := hit.snap.Restore()
	if fromDisk { // memory keeps it for the next turn
		if r.cache.Wants(hit.tokens) {
			r.cache.Store(hit.tokens, hit.snap, hit.logits)
		} else {
			hit.snap.Close()
		}
	}
	if err != nil {
		return nil, nil, err
	}
	res.CachedTokens = len(hit.tokens)
	if res.CachedTokens == len(req.Prompt) {
		return sess, hit.logits, nil
	}
	return sess, nil, nil
}

// marks are the checkpoints strictly between the cached prefix and the prompt's end, sorted.
// Chunks end at them whether or not the cache is on, so both compute the same chunks.
func (r *Runner) marks(req Request, cached int) []int {
	var out []int
	for _, m := range req.Checkpoints {
		if m > cached && m < len(req.Prompt) {
			out = append(out, m)
		}
	}
	if r.every > 0 {
		for m := (cached/r.every + 1) * r.every; m < len(req.Prompt); m += r.every {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// decode samples tokens from logits onwards until a stop, the limit, or an error. The first
// token is chosen on the host; a session that can generate on its device (backend.Generator)
// then goes on there, unless the request reads every row (OnLogits). It returns the sequence the
// session has consumed and the logits row that follows it.
func (r *Runner) decode(ctx context.Context, req Request, sess backend.Session, logits []float32, res *Result, emit func(Token) (bool, error)) ([]int, []float32, error) {
	p := req.Sampling
	if p.Seed == nil { // one seed for the host's first choice and the device's later ones
		seed := rand.Uint64()
		p.Seed = &seed
	}
	sampler := sample.New(p, req.Prompt)
	consumed := func() []int { return append(slices.Clone(req.Prompt), res.Tokens[:len(res.Tokens)-1]...) }
	if err := ctx.Err(); err != nil { // a prompt served whole from the cache ran no prefill check
		return nil, nil, err
	}
	for step := 0; ; step++ {
		if req.OnLogits != nil {
			if err := req.OnLogits(step, logits); err != nil {
				return nil, nil, err
			}
		}
		choice, err := next(sampler, req.Steer, logits)
		if err != nil {
			return nil, nil, err
		}
		res.Tokens = append(res.Tokens, choice.ID)
		stop, err := emit(Token{ID: choice.ID, Logprob: choice.Logprob, Top: choice.Top})
		if err != nil {
			return nil, nil, err
		}
		if stop || slices.Contains(req.StopIDs, choice.ID) {
			res.FinishReason = "stop"
			return consumed(), logits, nil
		}
		if len(res.Tokens) == req.MaxTokens {
			res.FinishReason = "length"
			return consumed(), logits, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if g, ok := sess.(backend.Generator); ok && step == 0 && req.OnLogits == nil && req.Steer == nil {
			last, err := r.onDevice(ctx, g, req, p, res, emit)
			if !errors.Is(err, backend.ErrNotOnDevice) {
				return append(slices.Clone(req.Prompt), res.Tokens...), last, err
			}
		}
		rows, err := sess.Forward([]int{choice.ID}, false)
		if err != nil {
			return nil, nil, err
		}
		logits = rows[0]
	}
}

// next chooses the next token from logits, as steer allows (nil: freely).
func next(sampler *sample.Sampler, steer Steer, logits []float32) (sample.Choice, error) {
	if steer == nil {
		return sampler.Next(logits), nil
	}
	var c sample.Choice
	if id, forced, allowed := steer.Next(); forced {
		c = sampler.Forced(id)
	} else {
		c = sampler.NextAllowed(logits, allowed)
	}
	return c, steer.Accept(c.ID)
}

// onDevice runs the rest of the generation on the session's device (see backend.Generator).
func (r *Runner) onDevice(ctx context.Context, g backend.Generator, req Request, p sample.Params, res *Result, emit func(Token) (bool, error)) ([]float32, error) {
	first := res.Tokens[0]
	last, err := g.Continue(ctx, p, req.Prompt, first, req.MaxTokens-1, req.StopIDs, func(c sample.Choice) (bool, error) {
		res.Tokens = append(res.Tokens, c.ID)
		stop, err := emit(Token{ID: c.ID, Logprob: c.Logprob, Top: c.Top})
		if stop || slices.Contains(req.StopIDs, c.ID) {
			res.FinishReason = "stop"
			return true, err
		}
		return false, err
	})
	if err == nil && res.FinishReason == "" {
		res.FinishReason = "length"
	}
	return last, err
}

// lookup finds the longest cached prefix of the prompt: in memory, or on disk when the disk
// holds a longer one (fromDisk: the entry is loaded, not yet in memory).
func (r *Runner) lookup(req Request) (hit *entry, fromDisk bool) {
	if req.NoCache {
		return nil, false
	}
	hit = r.cache.Lookup(req.Prompt)
	if r.disk == nil {
		return hit, false
	}
	de := r.disk.longest(req.Prompt)
	if de == nil || hit != nil && len(de.tokens) <= len(hit.tokens) {
		return hit, false
	}
	snap, logits, err := r.disk.load(de, r.codec)
	if err != nil {
		return hit, false // the file is gone; memory's hit, if any, still serves
	}
	return &entry{tokens: de.tokens, snap: snap, logits: logits}, true
}
