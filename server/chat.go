package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lilyformac/lily/engine/sample"
)

// chatRequest is the subset of OpenAI's chat completion request Lily reads; unknown fields are ignored.
type chatRequest struct {
	samplingFields
	Model               string                     `json:"model"`
	Messages            json.RawMessage            `json:"messages"`
	MaxTokens           *int                       `json:"max_tokens"`
	MaxCompletionTokens *int                       `json:"max_completion_tokens"`
	Logprobs            *bool                      `json:"logprobs"`
	TopLogprobs         *int                       `json:"top_logprobs"`
	Stream              bool                       `json:"stream"`
	StreamOptions       *streamOptions             `json:"stream_options"`
	Tools               json.RawMessage            `json:"tools"`
	ToolChoice          json.RawMessage            `json:"tool_choice"`
	ParallelToolCalls   *bool                      `json:"parallel_tool_calls"`
	ChatTemplateKwargs  map[string]json.RawMessage `json:"chat_template_kwargs"`
	ReasoningEffort     *string                    `json:"reasoning_effort"`
	ThinkingBudget      *int                       `json:"thinking_budget"` // Qwen's name; reasoning tokens before the server closes the reasoning
	ResponseFormat      *responseFormat            `json:"response_format"`
	// AddGenerationPrompt and ContinueFinalMessage are vLLM's fields (chat.ResolveEnding).
	AddGenerationPrompt  *bool `json:"add_generation_prompt"`
	ContinueFinalMessage *bool `json:"continue_final_message"`
}

// responseFormat is chat's response_format: text, json_object, or json_schema with the schema
// under json_schema.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// format is the neutral output format response_format asks for.
func (f *responseFormat) format() (outputFormat, error) {
	if f == nil {
		return outputFormat{}, nil
	}
	switch f.Type {
	case "text":
		return outputFormat{}, nil
	case "json_object":
		return outputFormat{kind: "json_object"}, nil
	case "json_schema":
		if f.JSONSchema == nil || len(bytes.TrimSpace(f.JSONSchema.Schema)) == 0 {
			return outputFormat{}, badRequest("response_format json_schema needs json_schema.schema", "response_format.json_schema")
		}
		return outputFormat{kind: "json_schema", schema: f.JSONSchema.Schema}, nil
	}
	return outputFormat{}, badRequest(fmt.Sprintf("response_format.type %q: expected text, json_object or json_schema", f.Type), "response_format.type")
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// samplingFields are shared by chat and text completions.
type samplingFields struct {
	Temperature       *float32           `json:"temperature"`
	TopP              *float32           `json:"top_p"`
	TopK              *int               `json:"top_k"`
	MinP              *float32           `json:"min_p"`
	PresencePenalty   *float32           `json:"presence_penalty"`
	FrequencyPenalty  *float32           `json:"frequency_penalty"`
	RepetitionPenalty *float32           `json:"repetition_penalty"`
	Seed              *int64             `json:"seed"`
	Stop              json.RawMessage    `json:"stop"`
	LogitBias         map[string]float32 `json:"logit_bias"`
	N                 *int               `json:"n"`
}

// qwenDefaults are Qwen's recommended sampling settings for Qwen3.6.
func qwenDefaults(thinking bool) sample.Params {
	if thinking {
		return sample.Params{Temperature: 1.0, TopP: 0.95, TopK: 20}
	}
	return sample.Params{Temperature: 0.7, TopP: 0.8, TopK: 20, PresencePenalty: 1.5}
}

// params applies the request's explicit values over defaults and validates them.
func (f samplingFields) params(def sample.Params, vocab int) (sample.Params, []string, error) {
	p := def
	p.VocabLimit = vocab
	if f.N != nil && *f.N != 1 {
		return p, nil, badRequest("n must be 1: Lily generates one choice per request", "n")
	}
	if f.Temperature != nil {
		p.Temperature = *f.Temperature
	}
	if f.TopP != nil {
		p.TopP = *f.TopP
	}
	if f.TopK != nil {
		p.TopK = max(*f.TopK, 0) // -1 (vLLM's "off") and 0 both disable top-k
	}
	if f.MinP != nil {
		p.MinP = *f.MinP
	}
	if f.PresencePenalty != nil {
		p.PresencePenalty = *f.PresencePenalty
	}
	if f.FrequencyPenalty != nil {
		p.FrequencyPenalty = *f.FrequencyPenalty
	}
	if f.RepetitionPenalty != nil {
		p.RepetitionPenalty = *f.RepetitionPenalty
	}
	if f.Seed != nil {
		seed := uint64(*f.Seed)
		p.Seed = &seed
	}
	if len(f.LogitBias) > 0 {
		p.LogitBias = map[int]float32{}
		for k, v := range f.LogitBias {
			id, err := strconv.Atoi(k)
			if err != nil {
				return p, nil, badRequest(fmt.Sprintf("logit_bias: key %q is not a token id", k), "logit_bias")
			}
			p.LogitBias[id] = v
		}
	}
	if err := p.Validate(); err != nil {
		return p, nil, badRequest(err.Error(), "")
	}
	stops, err := stopStrings(f.Stop)
	return p, stops, err
}

// stopStrings reads `stop`: a string, a list of up to 16 strings, or null.
func stopStrings(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("stop must be a string or a list of strings", "stop")
	}
	if len(list) > 16 {
		return nil, badRequest("stop: at most 16 sequences", "stop")
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// checkMessages rejects what Lily cannot feed the model, with a clear 400.
func checkMessages(raw json.RawMessage) error {
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &msgs); err != nil || len(msgs) == 0 {
		return badRequest("messages must be a non-empty array of {role, content} objects", "messages")
	}
	for i, m := range msgs {
		if m.Role == "" {
			return badRequest(fmt.Sprintf("messages[%d].role is missing", i), "messages")
		}
		c := bytes.TrimSpace(m.Content)
		if len(c) == 0 || c[0] != '[' {
			continue
		}
		var parts []struct {
			Type string          `json:"type"`
			Text json.RawMessage `json:"text"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return badRequest(fmt.Sprintf("messages[%d].content must be a string or an array of content parts", i), "messages")
		}
		for j, p := range parts {
			if p.Type != "text" {
				return badRequest(fmt.Sprintf("messages[%d]: content part type %q is not supported: Lily serves a text-only model", i, p.Type), "messages")
			}
			if t := bytes.TrimSpace(p.Text); len(t) == 0 || t[0] != '"' {
				return badRequest(fmt.Sprintf("messages[%d].content[%d].text must be a string", i, j), fmt.Sprintf("messages[%d].content[%d].text", i, j))
			}
		}
	}
	return nil
}

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func (s *Server) chatCompletions(c *gin.Context) {
	var req chatRequest
	s.serveTurn(c, func() (*turn, error) {
		if err := decodeBody(c, &req); err != nil {
			return nil, err
		}
		return req.turn()
	}, func(ctx context.Context, m *Model, p *turnPlan) {
		cc := &chatCall{s: s, m: m, id: newID("chatcmpl-"), created: time.Now().Unix(), parallel: req.ParallelToolCalls == nil || *req.ParallelToolCalls, logprobs: p.g.logprobs}
		if req.Stream {
			cc.stream(c, ctx, p, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		} else {
			cc.once(c, ctx, p)
		}
	})
}

// turn translates a chat completion request into the neutral turn.
func (req *chatRequest) turn() (*turn, error) {
	choice, err := openAIToolChoice(req.ToolChoice)
	if err != nil {
		return nil, err
	}
	format, err := req.ResponseFormat.format()
	if err != nil {
		return nil, err
	}
	return &turn{
		messages: req.Messages, tools: req.Tools, choice: choice, effort: req.ReasoningEffort, budget: req.ThinkingBudget,
		kwargs: req.ChatTemplateKwargs, addGen: req.AddGenerationPrompt, cont: req.ContinueFinalMessage,
		sampling: req.samplingFields, maxTokens: []*int{req.MaxCompletionTokens, req.MaxTokens},
		logprobs: req.Logprobs != nil && *req.Logprobs, topLogprobs: req.TopLogprobs, format: format,
	}, nil
}

// openAIToolChoice reads tool_choice: "auto", "none", "required" or a named function.
func openAIToolChoice(raw json.RawMessage) (toolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return toolChoice{}, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case "auto", "none", "required":
			return toolChoice{mode: mode}, nil
		}
		return toolChoice{}, badRequest(fmt.Sprintf("tool_choice %q: expected auto, none, required or a named function", mode), "tool_choice")
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Function.Name == "" {
		return toolChoice{}, badRequest(`tool_choice must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}`, "tool_choice")
	}
	return toolChoice{mode: "named", name: named.Function.Name}, nil
}

// turnCheckpoints are where a later request is likely to leave this prompt, so the prefix cache
// keeps the prefill's state there (the recurrent layers' state exists only where it was saved):
// the end of the first message (the system prompt and tools, shared by every conversation of a
// client) and the end of the last message, before the generation prompt (the next turn of this
// conversation appends the answer there, rendered as the template renders history). Messages
// start with <|im_start|> in Qwen's template; a template without it gets none.
func turnCheckpoints(m *Model, ids []int) []int {
	start, ok := m.Tokenizer.TokenID("<|im_start|>")
	if !ok {
		return nil
	}
	var at []int
	for i, id := range ids {
		if id == start && i > 0 {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return nil
	}
	return []int{at[0], at[len(at)-1]}
}

// encodePrompt tokenizes a prompt, giving up as soon as it cannot leave room for one token of
// output: an over-long prompt costs the tokenizer only the part that fits.
func encodePrompt(m *Model, text string) ([]int, error) {
	ids, ok := m.Tokenizer.EncodeLimit(text, m.Context-1)
	if !ok {
		// The whole count, for the error only (Claude Code reads it to decide how much to compact).
		n := len(m.Tokenizer.Encode(text))
		return nil, contextExceeded(fmt.Sprintf("the prompt is %d tokens, more than %d; this model's context is %d tokens", n, m.Context-1, m.Context), n, m.Context-1)
	}
	return ids, nil
}

// budget resolves the completion-token limit against the context window.
func (s *Server) budget(m *Model, promptLen int, limits ...*int) (int, error) {
	room := m.Context - promptLen
	if room < 1 {
		return 0, contextExceeded(fmt.Sprintf("the prompt is %d tokens; this model's context is %d tokens", promptLen, m.Context), promptLen, m.Context-1)
	}
	if s.cfg.MaxOutputTokens > 0 {
		room = min(room, s.cfg.MaxOutputTokens)
	}
	for _, l := range limits {
		if l != nil {
			if *l < 1 {
				return 0, badRequest("max_tokens must be at least 1", "max_tokens")
			}
			return min(*l, room), nil
		}
	}
	return room, nil
}
