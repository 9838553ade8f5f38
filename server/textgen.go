package server

import (
	"context"
	"errors"
	"math"
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
	topLogprobs int                 // alternatives per token when logprobs are on
	logprobs    bool                // report per-token logprobs
	checkpoints []int               // prompt lengths where the prefix cache should keep the prefill's state
	images      []runner.Image      // the prompt's images (their pad tokens expanded in prompt)
	steer       func() runner.Steer // a new steer for each generation (nil: none)
	ticket      *ticket
}

// tokenLogprob is one generated token's logprob entry.
type tokenLogprob struct {
	Text    string
	Logprob float32
	Top     []sample.Candidate
}

// textPiece is a piece of output text and the tokens it completes.
type textPiece struct {
	Text   string
	Tokens []tokenLogprob // logprobs of the tokens whose text this piece completes
	Count  int            // how many tokens' text this piece completes
}

type genOutcome struct {
	res     runner.Result
	finish  string // "stop" or "length"
	stopSeq string // the stop string that ended the output ("": none did)
	// reasoningTokens are the generated tokens whose text was reasoning (runTurn counts them; a
	// token whose text straddles </think> counts as reasoning).
	reasoningTokens int
}

// generate runs g on m, passing each token's text to out as it comes (with its logprobs); out
// may end the generation (a stop string). The outcome's finish is then "stop".
func (s *Server) generate(ctx context.Context, m *Model, g genRequest, out func(textPiece) (bool, error)) (genOutcome, error) {
	if s.observe != nil {
		s.observe(g)
	}
	if err := g.ticket.wait(ctx); err != nil {
		return genOutcome{}, err
	}
	defer g.ticket.release()
	admitted := time.Now()
	stream := m.Tokenizer.NewStream()
	stopped, first := false, true
	req := runner.Request{Prompt: g.prompt, Images: g.images, MaxTokens: g.maxTokens, Sampling: g.params, StopIDs: m.StopIDs, Checkpoints: g.checkpoints}
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
		p := textPiece{Text: stream.Add(tok.ID), Count: 1}
		if g.logprobs {
			p.Tokens = []tokenLogprob{logprobOf(m, tok)}
		}
		var err error
		stopped, err = out(p)
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
	if rest := stream.Flush(); rest != "" && !stopped {
		if stopped, err = out(textPiece{Text: rest}); err != nil {
			return genOutcome{res: res}, err
		}
	}
	finish := res.FinishReason
	if stopped {
		finish = "stop"
	}
	return genOutcome{res: res, finish: finish}, nil
}

// logprobOf is a generated token's logprob entry. A logprob of -Inf (a token of probability zero
// under a grammar's mask, forced by a steer) is written as OpenAI writes it, -9999: JSON has no
// infinity.
func logprobOf(m *Model, tok runner.Token) tokenLogprob {
	finite := func(lp float32) float32 {
		if math.IsInf(float64(lp), 0) || lp != lp {
			return -9999
		}
		return lp
	}
	e := tokenLogprob{Text: m.Tokenizer.Decode([]int{tok.ID}), Logprob: finite(tok.Logprob)}
	for _, c := range tok.Top {
		e.Top = append(e.Top, sample.Candidate{ID: c.ID, Logprob: finite(c.Logprob)})
	}
	return e
}

// stopper is the one stop-string policy: it passes text on as soon as no stop string can still
// claim it, holds back a tail that might begin one, and at the first stop string ends the text
// just before it (a stop string is never emitted, not even partly). The tokens whose text it
// holds wait with it, so logprobs arrive with their text.
type stopper struct {
	stops   []string
	held    string
	pending textPiece // tokens not yet passed on (Text unused)
	hit     string    // the stop string that ended the text ("": none yet)
}

// piece takes the next piece of text and returns what became final; done: a stop string ended it.
func (st *stopper) piece(p textPiece) (textPiece, bool) {
	st.pending.Tokens = append(st.pending.Tokens, p.Tokens...)
	st.pending.Count += p.Count
	text := st.held + p.Text
	if i, which := firstStop(text, st.stops); i >= 0 {
		st.held, st.hit = "", which
		return st.release(text[:i]), true
	}
	keep := stopPrefixSuffix(text, st.stops)
	st.held = text[len(text)-keep:]
	if keep == len(text) {
		return textPiece{}, false
	}
	return st.release(text[:len(text)-keep]), false
}

// flush ends the text: what was held is final.
func (st *stopper) flush() textPiece {
	text := st.held
	st.held = ""
	return st.release(text)
}

func (st *stopper) release(text string) textPiece {
	p := st.pending
	p.Text, st.pending = text, textPiece{}
	return p
}

// holding reports whether text is held back.
func (st *stopper) holding() bool { return st.held != "" }

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
