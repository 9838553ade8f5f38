// Package runner generates tokens for one request at a time on a backend, reusing cached prompt
// prefixes (KV cache plus DeltaNet state snapshots) and sampling with the server's sampler.
package runner

import (
	"context"
	"errors"
	"fmt"
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
	mu        sync.Mutex
	busy      bool
	ctxLength int
}

// Options tune a runner.
type Options struct {
	CacheBytes   int64 // prefix-cache budget (0 disables the cache)
	PrefillChunk int   // prompt tokens per forward call during prefill (default 256)
	Context      int   // maximum positions per sequence (default: the model's)
}

// New returns a runner over b.
func New(b backend.Backend, o Options) *Runner {
	if o.PrefillChunk <= 0 {
		o.PrefillChunk = 256
	}
	if o.Context <= 0 {
		o.Context = b.Config().MaxPositions
	}
	return &Runner{b: b, cache: NewCache(o.CacheBytes), chunk: o.PrefillChunk, ctxLength: o.Context}
}

// Context is the maximum number of positions (prompt + generated) per request.
func (r *Runner) Context() int { return r.ctxLength }

// Cache exposes the prefix cache (for metrics).
func (r *Runner) Cache() *Cache { return r.cache }

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

	res := Result{PromptTokens: len(req.Prompt)}
	if len(req.Prompt) == 0 {
		return res, errors.New("runner: empty prompt")
	}
	if req.MaxTokens < 1 {
		return res, fmt.Errorf("runner: max tokens must be at least 1, got %d", req.MaxTokens)
	}
	if r.ctxLength > 0 && len(req.Prompt)+req.MaxTokens > r.ctxLength {
		return res, fmt.Errorf("runner: %d prompt + %d new tokens exceed the context of %d", len(req.Prompt), req.MaxTokens, r.ctxLength)
	}
	if err := req.Sampling.Validate(); err != nil {
		return res, err
	}
	start := time.Now()
	var sess backend.Session
	var logits []float32
	if hit := r.lookup(req); hit != nil {
		sess, res.CachedTokens = hit.sess.Clone(), len(hit.tokens)
		if res.CachedTokens == len(req.Prompt) {
			logits = hit.logits
		}
	} else {
		sess = r.b.NewSession()
	}
	for done := res.CachedTokens; done < len(req.Prompt); {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		end := min(done+r.chunk, len(req.Prompt))
		rows, err := sess.Forward(req.Prompt[done:end], false)
		if err != nil {
			return res, err
		}
		logits, done = rows[0], end
		if req.Progress != nil {
			req.Progress(done, len(req.Prompt))
		}
	}
	if !req.NoCache && res.CachedTokens < len(req.Prompt) {
		r.cache.Store(req.Prompt, sess.Clone(), logits)
	}
	res.Prefill = time.Since(start)
	start = time.Now()

	sampler := sample.New(req.Sampling, req.Prompt)
	for {
		choice := sampler.Next(logits)
		res.Tokens = append(res.Tokens, choice.ID)
		stop, err := emit(Token{ID: choice.ID, Logprob: choice.Logprob, Top: choice.Top})
		if err != nil {
			return res, err
		}
		if stop || slices.Contains(req.StopIDs, choice.ID) {
			res.FinishReason = "stop"
			break
		}
		if len(res.Tokens) == req.MaxTokens {
			res.FinishReason = "length"
			break
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		rows, err := sess.Forward([]int{choice.ID}, false)
		if err != nil {
			return res, err
		}
		logits = rows[0]
	}
	res.Decode = time.Since(start)
	// The session has consumed prompt + all generated tokens but the last: cache that state, so
	// a follow-up request that repeats this conversation skips it.
	if !req.NoCache && len(res.Tokens) > 1 {
		seq := append(slices.Clone(req.Prompt), res.Tokens[:len(res.Tokens)-1]...)
		r.cache.Store(seq, sess, logits)
	}
	return res, nil
}

func (r *Runner) lookup(req Request) *entry {
	if req.NoCache {
		return nil
	}
	return r.cache.Lookup(req.Prompt)
}
