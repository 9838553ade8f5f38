package server

import (
	"bytes"
	"context"
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
func promptIDs(raw json.RawMessage, m *Model) ([]int, string, error) {
	tok := m.Tokenizer
	raw = bytes.TrimSpace(raw)
	var text string
	if json.Unmarshal(raw, &text) == nil {
		ids, err := encodePrompt(m, text)
		return ids, text, err
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		if len(texts) != 1 {
			return nil, "", badRequest("prompt: exactly one prompt per request", "prompt")
		}
		ids, err := encodePrompt(m, texts[0])
		return ids, texts[0], err
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
	a, ok := s.startAdmission(c)
	if !ok {
		return
	}
	defer a.end()
	var req completionRequest
	if err := decodeBody(c, &req); err != nil {
		abortWith(c, err)
		return
	}
	g, stops, err := planCompletion(m, &req)
	if err != nil {
		abortWith(c, err)
		return
	}
	if !a.enqueue() {
		return
	}
	prompt, promptText, err := promptIDs(req.Prompt, m)
	if err == nil && len(prompt) == 0 {
		err = badRequest("prompt is empty", "prompt")
	}
	if err != nil {
		abortWith(c, err)
		return
	}
	limit := 16 // OpenAI's default for text completions
	if req.MaxTokens != nil {
		limit = *req.MaxTokens
	}
	if g.maxTokens, err = s.budget(m, len(prompt), &limit); err != nil {
		abortWith(c, err)
		return
	}
	ctx, ticket := a.admitted()
	g.prompt, g.ticket = prompt, ticket
	tc := &textCall{s: s, m: m, id: newID("cmpl-"), created: time.Now().Unix(), lp: &textLogprobs{on: g.logprobs, tok: m.Tokenizer}, stops: stops}
	if req.Stream {
		tc.stream(c, ctx, g, req.Echo, promptText, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
	} else {
		tc.once(c, ctx, g, req.Echo, promptText)
	}
}

// planCompletion validates a text completion's options; it returns the stop strings apart.
func planCompletion(m *Model, req *completionRequest) (genRequest, []string, error) {
	var g genRequest
	if req.Suffix != nil && *req.Suffix != "" {
		return g, nil, badRequest("suffix is not supported", "suffix")
	}
	params, stops, err := req.params(qwenDefaults(false), m.Tokenizer.VocabSize())
	if err != nil {
		return g, nil, err
	}
	g.params = params
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > 5 {
			return g, nil, badRequest("logprobs must be between 0 and 5", "logprobs")
		}
		g.params.Logprobs, g.params.TopLogprobs = true, *req.Logprobs
	}
	g.logprobs, g.topLogprobs = req.Logprobs != nil, g.params.TopLogprobs
	return g, stops, nil
}

// textCall carries one text completion's output state.
type textCall struct {
	s       *Server
	m       *Model
	id      string
	created int64
	lp      *textLogprobs
	stops   []string // a text completion's stop strings apply to the raw text
}

// generate runs g, passing out the text no stop string can still claim.
func (tc *textCall) generate(ctx context.Context, g genRequest, out func(textPiece) error) (genOutcome, error) {
	st := &stopper{stops: tc.stops}
	o, err := tc.s.generate(ctx, tc.m, g, func(p textPiece) (bool, error) {
		p, done := st.piece(p)
		return done, out(p)
	})
	if err == nil && st.hit == "" { // the end: what the stopper held is final
		err = out(st.flush())
	}
	o.stopSeq = st.hit
	return o, err
}

func (tc *textCall) chunk(text string, finish *string) gin.H {
	return gin.H{"id": tc.id, "object": "text_completion", "created": tc.created, "model": tc.m.ID,
		"choices": []any{gin.H{"text": text, "index": 0, "logprobs": tc.lp.take(), "finish_reason": finish}}}
}

func (tc *textCall) stream(c *gin.Context, ctx context.Context, g genRequest, echo bool, promptText string, includeUsage bool) {
	w := startSSE(c, tc.s.cfg.KeepAlive)
	if echo {
		w.data(tc.chunk(promptText, nil))
	}
	outcome, err := tc.generate(ctx, g, func(p textPiece) error {
		if p.Text == "" && len(p.Tokens) == 0 {
			return nil
		}
		tc.lp.add(p)
		return w.data(tc.chunk(p.Text, nil))
	})
	if err != nil {
		w.fail(generationError(ctx, err))
		return
	}
	finish := outcome.finish
	w.data(tc.chunk("", &finish))
	if includeUsage {
		w.data(gin.H{"id": tc.id, "object": "text_completion", "created": tc.created, "model": tc.m.ID, "choices": []any{}, "usage": usageOf(outcome)})
	}
	w.close()
}

func (tc *textCall) once(c *gin.Context, ctx context.Context, g genRequest, echo bool, promptText string) {
	var text bytes.Buffer
	if echo {
		text.WriteString(promptText)
	}
	outcome, err := tc.generate(ctx, g, func(p textPiece) error {
		tc.lp.add(p)
		text.WriteString(p.Text)
		return nil
	})
	if err != nil {
		failPlain(c, ctx, err)
		return
	}
	finish := outcome.finish
	resp := tc.chunk(text.String(), &finish)
	resp["usage"] = usageOf(outcome)
	reply(c, http.StatusOK, resp)
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
