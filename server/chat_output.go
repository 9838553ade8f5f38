package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/lilyformac/lily/engine/parse"
)

// chatCall carries one chat completion's output state.
type chatCall struct {
	s        *Server
	m        *Model
	id       string
	created  int64
	parallel bool // parallel_tool_calls: false keeps only the first call
	logprobs bool
	lp       []logprobEntry // logprobs not yet attached to a chunk
	sawCall  bool
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details,omitempty"`
}

func usageOf(o genOutcome) *usage {
	u := &usage{PromptTokens: o.res.PromptTokens, CompletionTokens: len(o.res.Tokens)}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails.CachedTokens = o.res.CachedTokens
	u.CompletionTokensDetails = &struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	}{o.reasoningTokens}
	return u
}

type logprobAlt struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type logprobEntry struct {
	logprobAlt
	TopLogprobs []logprobAlt `json:"top_logprobs"`
}

func byteList(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

func (cc *chatCall) logprobEntries(tokens []tokenLogprob) []logprobEntry {
	out := make([]logprobEntry, 0, len(tokens))
	for _, t := range tokens {
		e := logprobEntry{logprobAlt: logprobAlt{Token: t.Text, Logprob: t.Logprob, Bytes: byteList(t.Text)}, TopLogprobs: []logprobAlt{}}
		for _, alt := range t.Top {
			text := cc.m.Tokenizer.Decode([]int{alt.ID})
			e.TopLogprobs = append(e.TopLogprobs, logprobAlt{Token: text, Logprob: alt.Logprob, Bytes: byteList(text)})
		}
		out = append(out, e)
	}
	return out
}

// keep applies parallel_tool_calls=false: calls after the first are dropped.
func (cc *chatCall) keep(d parse.Delta) bool {
	if d.ToolCall == nil {
		return d.Content != "" || d.Reasoning != ""
	}
	if !cc.parallel && d.ToolCall.Index > 0 {
		return false
	}
	cc.sawCall = true
	return true
}

func (cc *chatCall) finishReason(o genOutcome) string {
	if cc.sawCall && o.finish == "stop" {
		return "tool_calls"
	}
	return o.finish
}

type chunkChoice struct {
	Index        int            `json:"index"`
	Delta        map[string]any `json:"delta"`
	Logprobs     any            `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
}

type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

func (cc *chatCall) chunk(delta map[string]any, finish *string) chunk {
	ch := chunkChoice{Delta: delta, FinishReason: finish}
	if cc.logprobs && len(cc.lp) > 0 {
		ch.Logprobs = map[string]any{"content": cc.lp}
		cc.lp = nil
	}
	return chunk{ID: cc.id, Object: "chat.completion.chunk", Created: cc.created, Model: cc.m.ID, Choices: []chunkChoice{ch}}
}

func deltaJSON(d parse.Delta) map[string]any {
	switch {
	case d.ToolCall != nil:
		call := map[string]any{"index": d.ToolCall.Index}
		fn := map[string]any{"arguments": d.ToolCall.Arguments}
		if d.ToolCall.ID != "" {
			call["id"], call["type"] = d.ToolCall.ID, "function"
			fn["name"] = d.ToolCall.Name
		}
		call["function"] = fn
		return map[string]any{"tool_calls": []any{call}}
	case d.Reasoning != "":
		// Both names: vLLM/Ollama/OpenRouter clients read `reasoning`, llama.cpp/DeepSeek ones `reasoning_content`.
		return map[string]any{"reasoning_content": d.Reasoning, "reasoning": d.Reasoning}
	default:
		return map[string]any{"content": d.Content}
	}
}

func (cc *chatCall) sendDeltas(w *sseWriter, deltas []parse.Delta) error {
	for _, d := range deltas {
		if !cc.keep(d) {
			continue
		}
		if err := w.data(cc.chunk(deltaJSON(d), nil)); err != nil {
			return err
		}
	}
	return nil
}

func (cc *chatCall) stream(c *gin.Context, ctx context.Context, p *turnPlan, includeUsage bool) {
	w := startSSE(c, cc.s.cfg.KeepAlive)
	if err := w.data(cc.chunk(map[string]any{"role": "assistant", "content": ""}, nil)); err != nil {
		w.close()
		return
	}
	outcome, _, err := cc.s.runTurn(ctx, cc.m, p, func(d []parse.Delta, piece textPiece) error {
		cc.lp = append(cc.lp, cc.logprobEntries(piece.Tokens)...)
		return cc.sendDeltas(w, d)
	})
	if err != nil {
		w.fail(generationError(ctx, err))
		return
	}
	finish := cc.finishReason(outcome)
	w.data(cc.chunk(map[string]any{}, &finish))
	if includeUsage {
		w.data(chunk{ID: cc.id, Object: "chat.completion.chunk", Created: cc.created, Model: cc.m.ID, Choices: []chunkChoice{}, Usage: usageOf(outcome)})
	}
	w.close()
}

func (cc *chatCall) once(c *gin.Context, ctx context.Context, p *turnPlan) {
	outcome, r, err := cc.s.runTurn(ctx, cc.m, p, func(_ []parse.Delta, piece textPiece) error {
		cc.lp = append(cc.lp, cc.logprobEntries(piece.Tokens)...)
		return nil
	})
	if err != nil {
		failPlain(c, ctx, err)
		return
	}
	msg := map[string]any{"role": "assistant", "content": nil}
	if r.Content != "" {
		msg["content"] = r.Content
	}
	if r.Reasoning != "" {
		msg["reasoning_content"], msg["reasoning"] = r.Reasoning, r.Reasoning
	}
	var calls []any
	for _, tc := range r.ToolCalls {
		if !cc.parallel && tc.Index > 0 {
			continue
		}
		cc.sawCall = true
		calls = append(calls, map[string]any{"id": tc.ID, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}})
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	} else if r.Content == "" {
		msg["content"] = ""
	}
	var lp any
	if cc.logprobs {
		lp = map[string]any{"content": cc.lp}
	}
	reply(c, http.StatusOK, gin.H{
		"id": cc.id, "object": "chat.completion", "created": cc.created, "model": cc.m.ID,
		"choices": []any{gin.H{"index": 0, "message": msg, "logprobs": lp, "finish_reason": cc.finishReason(outcome)}},
		"usage":   usageOf(outcome),
	})
}

// generationError maps a failed generation to the error the client sees: the cause its context
// ended with (the request timeout, a shutdown), else the error itself.
func generationError(ctx context.Context, err error) error {
	var ae *apiError
	if errors.As(context.Cause(ctx), &ae) {
		return ae
	}
	return err
}
