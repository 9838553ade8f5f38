package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// completionRequest is OpenAI's legacy text completion request (raw prompt, no chat template).
type completionRequest struct {
	samplingFields
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	Logprobs      *int            `json:"logprobs"`
	Echo          bool            `json:"echo"`
	Suffix        *string         `json:"suffix"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
}

// promptIDs reads `prompt`: a string, a one-element list of strings, or a list of token ids.
func promptIDs(raw json.RawMessage, tok Tokenizer) ([]int, string, error) {
	raw = bytes.TrimSpace(raw)
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return tok.Encode(text), text, nil
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		if len(texts) != 1 {
			return nil, "", badRequest("prompt: exactly one prompt per request", "prompt")
		}
		return tok.Encode(texts[0]), texts[0], nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				return nil, "", badRequest("prompt: token id outside the vocabulary", "prompt")
			}
		}
		return ids, tok.Decode(ids), nil
	}
	return nil, "", badRequest("prompt must be a string, a list with one string, or a list of token ids", "prompt")
}

func (s *Server) completions(c *gin.Context) {
	m := s.ready(c)
	if m == nil {
		return
	}
	var req completionRequest
	if err := decodeBody(c, &req); err != nil {
		abortWith(c, err)
		return
	}
	if req.Suffix != nil && *req.Suffix != "" {
		abortWith(c, badRequest("suffix is not supported", "suffix"))
		return
	}
	prompt, promptText, err := promptIDs(req.Prompt, m.Tokenizer)
	if err != nil {
		abortWith(c, err)
		return
	}
	if len(prompt) == 0 {
		abortWith(c, badRequest("prompt is empty", "prompt"))
		return
	}
	params, stops, err := req.params(qwenDefaults(false), m.Tokenizer.VocabSize())
	if err != nil {
		abortWith(c, err)
		return
	}
	limit := 16 // OpenAI's default for text completions
	if req.MaxTokens != nil {
		limit = *req.MaxTokens
	}
	maxTokens, err := s.budget(m, len(prompt), &limit)
	if err != nil {
		abortWith(c, err)
		return
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > 5 {
			abortWith(c, badRequest("logprobs must be between 0 and 5", "logprobs"))
			return
		}
		params.Logprobs, params.TopLogprobs = true, *req.Logprobs
	}
	t, ctx, done, ok := s.admit(c)
	if !ok {
		return
	}
	defer done()
	g := genRequest{prompt: prompt, maxTokens: maxTokens, params: params, stops: stops, logprobs: req.Logprobs != nil, topLogprobs: params.TopLogprobs, ticket: t}
	id, created := newID("cmpl-"), time.Now().Unix()
	lp := &textLogprobs{on: req.Logprobs != nil, tok: m.Tokenizer}
	choice := func(text string, finish *string) gin.H {
		return gin.H{"text": text, "index": 0, "logprobs": lp.take(), "finish_reason": finish}
	}
	if req.Stream {
		w := startSSE(c, s.cfg.KeepAlive)
		if req.Echo {
			w.data(gin.H{"id": id, "object": "text_completion", "created": created, "model": m.ID, "choices": []any{choice(promptText, nil)}})
		}
		outcome, err := s.generate(ctx, m, g, func(p textPiece) error {
			lp.add(p)
			return w.data(gin.H{"id": id, "object": "text_completion", "created": created, "model": m.ID, "choices": []any{choice(p.Text, nil)}})
		})
		if err != nil {
			w.fail(generationError(ctx, err))
			return
		}
		finish := outcome.finish
		w.data(gin.H{"id": id, "object": "text_completion", "created": created, "model": m.ID, "choices": []any{choice("", &finish)}})
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			w.data(gin.H{"id": id, "object": "text_completion", "created": created, "model": m.ID, "choices": []any{}, "usage": usageOf(outcome)})
		}
		w.close()
		return
	}
	var text bytes.Buffer
	if req.Echo {
		text.WriteString(promptText)
	}
	outcome, err := s.generate(ctx, m, g, func(p textPiece) error {
		lp.add(p)
		text.WriteString(p.Text)
		return nil
	})
	if err != nil {
		failPlain(c, ctx, err)
		return
	}
	finish := outcome.finish
	c.JSON(http.StatusOK, gin.H{"id": id, "object": "text_completion", "created": created, "model": m.ID,
		"choices": []any{choice(text.String(), &finish)}, "usage": usageOf(outcome)})
}

// textLogprobs accumulates the legacy completions logprobs object.
type textLogprobs struct {
	on      bool
	tok     Tokenizer
	tokens  []string
	lps     []float32
	tops    []map[string]float32
	offsets []int
	offset  int
}

func (l *textLogprobs) add(p textPiece) {
	if !l.on {
		return
	}
	for _, t := range p.Tokens {
		l.tokens = append(l.tokens, t.Text)
		l.lps = append(l.lps, t.Logprob)
		top := map[string]float32{}
		for _, alt := range t.Top {
			top[l.tok.Decode([]int{alt.ID})] = alt.Logprob
		}
		l.tops = append(l.tops, top)
		l.offsets = append(l.offsets, l.offset)
		l.offset += len(t.Text)
	}
}

// take returns the entries gathered since the last call (null when logprobs are off).
func (l *textLogprobs) take() any {
	if !l.on {
		return nil
	}
	out := gin.H{"tokens": l.tokens, "token_logprobs": l.lps, "top_logprobs": l.tops, "text_offset": l.offsets}
	l.tokens, l.lps, l.tops, l.offsets = []string{}, []float32{}, []map[string]float32{}, []int{}
	return out
}
