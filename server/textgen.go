package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/sample"
)

// genRequest is one generation, independent of the API dialect.
type genRequest struct {
	prompt      []int
	maxTokens   int
	params      sample.Params
	stops       []string
	topLogprobs int                 // alternatives per token when logprobs are on
	logprobs    bool                // report per-token logprobs
	checkpoints []int               // prompt lengths where the prefix cache should keep the prefill's state
	steer       func() runner.Steer // a new steer for each generation (nil: none)
	ticket      *ticket
}

// tokenLogprob is one generated token's logprob entry.
type tokenLogprob struct {
	Text    string
	Logprob float32
	Top     []sample.Candidate
}

// textPiece is output text that is final: no stop string can still cut it.
type textPiece struct {
	Text   string
	Tokens []tokenLogprob // logprobs of the tokens whose text this piece completes
	Count  int            // how many tokens' text this piece completes
}

type genOutcome struct {
	res     runner.Result
	finish  string // "stop" or "length"
	stopSeq string // the stop string that ended generation ("": none did)
	// reasoningTokens are the generated tokens whose text was reasoning (runTurn counts them; a
	// token whose text straddles </think> counts as reasoning).
	reasoningTokens int
}

// generate runs g on m, passing final text pieces to out. Stop strings end generation and are
// never emitted, not even partly: text that might begin a stop string is held back until it
// cannot.
func (s *Server) generate(ctx context.Context, m *Model, g genRequest, out func(textPiece) error) (genOutcome, error) {
	if s.observe != nil {
		s.observe(g)
	}
	if err := g.ticket.wait(ctx); err != nil {
		return genOutcome{}, err
	}
	defer g.ticket.release()
	admitted := time.Now()
	stream := m.Tokenizer.NewStream()
	var pending strings.Builder
	var pendingLP []tokenLogprob
	pendingN := 0
	stopped, stopSeq := false, ""
	first := true

	release := func(text string) error {
		if text == "" && len(pendingLP) == 0 {
			return nil
		}
		p := textPiece{Text: text, Tokens: pendingLP, Count: pendingN}
		pendingLP, pendingN = nil, 0
		return out(p)
	}
	// flushSafe emits the part of pending that no stop string can still claim.
	flushSafe := func(final bool) (bool, error) {
		text := pending.String()
		if i, which := firstStop(text, g.stops); i >= 0 {
			pending.Reset()
			stopSeq = which
			return true, release(text[:i])
		}
		keep := 0
		if !final {
			keep = stopPrefixSuffix(text, g.stops)
		}
		if keep == len(text) && !final {
			return false, nil
		}
		pending.Reset()
		pending.WriteString(text[len(text)-keep:])
		return false, release(text[:len(text)-keep])
	}

	req := runner.Request{Prompt: g.prompt, MaxTokens: g.maxTokens, Sampling: g.params, StopIDs: m.StopIDs, Checkpoints: g.checkpoints}
	if g.steer != nil {
		req.Steer = g.steer()
	}
	res, err := m.Runner.Generate(ctx, req, func(tok runner.Token) (bool, error) {
		if first {
			first = false
			s.metrics.ttft.Observe(time.Since(admitted).Seconds())
		}
		if slices.Contains(m.StopIDs, tok.ID) {
			return false, nil // end of turn: the runner stops; nothing to show
		}
		text := stream.Add(tok.ID)
		pendingN++
		if g.logprobs {
			pendingLP = append(pendingLP, tokenLogprob{Text: m.Tokenizer.Decode([]int{tok.ID}), Logprob: tok.Logprob, Top: tok.Top})
		}
		pending.WriteString(text)
		var err error
		stopped, err = flushSafe(false)
		return stopped, err
	})
	s.metrics.promptTokens.Add(float64(res.PromptTokens))
	s.metrics.cachedTokens.Add(float64(res.CachedTokens))
	s.metrics.generatedTokens.Add(float64(len(res.Tokens)))
	if err != nil {
		return genOutcome{res: res}, err
	}
	if res.Decode > 0 && len(res.Tokens) > 1 {
		s.metrics.setDecodeRate(float64(len(res.Tokens)-1) / res.Decode.Seconds())
	}
	if !stopped {
		pending.WriteString(stream.Flush())
		if stopped, err = flushSafe(true); err != nil {
			return genOutcome{res: res}, err
		}
	}
	finish := res.FinishReason
	if stopped {
		finish = "stop"
	}
	return genOutcome{res: res, finish: finish, stopSeq: stopSeq}, nil
}

// firstStop finds the earliest occurrence of any stop string.
func firstStop(text string, stops []string) (int, string) {
	best, which := -1, ""
	for _, s := range stops {
		if i := strings.Index(text, s); i >= 0 && (best < 0 || i < best) {
			best, which = i, s
		}
	}
	return best, which
}

// stopPrefixSuffix is the length of the longest suffix of text that is a proper prefix of a stop string.
func stopPrefixSuffix(text string, stops []string) int {
	keep := 0
	for _, s := range stops {
		for n := min(len(s)-1, len(text)); n > keep; n-- {
			if strings.HasSuffix(text, s[:n]) {
				keep = n
				break
			}
		}
	}
	return keep
}

// failPlain answers a failed non-streaming generation, unless the client is gone (nobody to tell).
func failPlain(c *gin.Context, ctx context.Context, err error) {
	if err = generationError(ctx, err); errors.Is(err, context.Canceled) {
		return
	}
	abortWith(c, err)
}
