package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gin-gonic/gin"
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
