package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/grammar"
	"github.com/lilyformac/lily/engine/images"
	"github.com/lilyformac/lily/engine/parse"
)

// turn is one chat turn in dialect-neutral form. Every chat API (OpenAI chat completions and
// Responses, Anthropic Messages, Ollama's chat and generate) translates its request into a
// turn, and the turn's output — parser deltas while it streams, the parsed result and the
// outcome at the end — back into its own shapes. Rendering, encoding, budgeting, admission and
// output parsing live here, once.
type turn struct {
	messages json.RawMessage // OpenAI chat-shaped messages: the chat template's input
	prompt   *string         // instead of messages, a prompt already rendered (Ollama's raw generate)
	tools    json.RawMessage // OpenAI-shaped tools ([{type: function, function: {…}}]; nil: none)
	choice   toolChoice
	// thinking, when set, decides whether the model reasons; else chat_template_kwargs'
	// enable_thinking, then effort ("none": off), then on (the template's default).
	thinking *bool
	effort   *string
	// budget caps the reasoning in tokens (nil: effort's budget, effortBudgets); the model's
	// reasoning is then closed for it, with parse.ThinkClose.
	budget *int
	kwargs map[string]json.RawMessage // chat_template_kwargs
	// addGen and cont are add_generation_prompt and continue_final_message (nil: not given;
	// chat.ResolveEnding).
	addGen, cont *bool
	sampling     samplingFields
	stops        []string // stop sequences given outside sampling (Anthropic's stop_sequences)
	maxTokens    []*int   // the completion limits the dialect has, the first given wins
	logprobs     bool
	topLogprobs  *int
	format       outputFormat
	callID       func() string // a tool call's id (nil: parse's "call_…")
}

// outputFormat is the shape the answer must have (every dialect's response_format, format or
// text.format).
type outputFormat struct {
	kind   string          // "" (free text), "json_object" or "json_schema"
	schema json.RawMessage // the JSON Schema of json_schema
}

// toolChoice is what the client allows or demands of tool calls.
type toolChoice struct {
	mode string // "auto" (also ""), "none", "required" (at least one call) or "named"
	name string // the function a "named" choice calls
}

// turnPlan is a turn checked (planTurn) and, once admitted to the queue, rendered and encoded
// (prepareTurn).
type turnPlan struct {
	t        *turn
	tools    json.RawMessage // what the template gets (none under tool_choice none)
	parsed   []parse.Tool
	force    string // appended to the prompt to force a call ("": the model decides)
	thinking bool
	budget   int               // reasoning tokens allowed (0: no limit)
	grammar  *grammar.Grammar  // what the answer must follow (nil: free; constrain.go)
	stops    []string          // the stop strings, which apply to the answer's text (runTurn)
	text     string            // the rendered prompt
	images   []*images.Encoded // the prompt's images, in order (imagesInPrompt)
	g        genRequest
}

// planTurn checks everything a turn says that costs nothing to check, before it queues.
func (s *Server) planTurn(m *Model, t *turn) (*turnPlan, error) {
	p := &turnPlan{t: t}
	if t.prompt == nil {
		if err := checkMessages(t.messages); err != nil {
			return nil, err
		}
	}
	if err := p.planTools(); err != nil {
		return nil, err
	}
	var err error
	if p.thinking, err = thinkingEnabled(t); err != nil {
		return nil, err
	}
	if p.budget, err = thinkingBudget(t); err != nil {
		return nil, err
	}
	if err := s.planGrammar(p); err != nil {
		return nil, err
	}
	if p.forcedCall() {
		p.thinking = false // a forced call starts the answer (see constrain.go)
	}
	g := &p.g
	if g.params, p.stops, err = t.sampling.params(qwenDefaults(p.thinking), m.Tokenizer.VocabSize()); err != nil {
		return nil, err
	}
	p.stops = append(p.stops, t.stops...)
	if p.grammar != nil {
		p.stops = nil // the grammar shapes the whole answer: a stop string would break its format
	}
	g.logprobs = t.logprobs
	if t.topLogprobs != nil {
		if !g.logprobs {
			return nil, badRequest("top_logprobs requires logprobs: true", "top_logprobs")
		}
		g.topLogprobs = *t.topLogprobs
	}
	g.params.Logprobs, g.params.TopLogprobs = g.logprobs, g.topLogprobs
	if err := g.params.Validate(); err != nil {
		return nil, badRequest(err.Error(), "top_logprobs")
	}
	return p, nil
}

// planTools reads the tools and applies the tool choice.
func (p *turnPlan) planTools() error {
	t := p.t
	if raw := bytes.TrimSpace(t.tools); len(raw) > 0 && string(raw) != "null" {
		tools, err := parse.ToolsFromOpenAI(t.tools)
		if err != nil {
			return badRequest("tools: "+err.Error(), "tools")
		}
		p.tools, p.parsed = t.tools, tools
	}
	switch t.choice.mode {
	case "", "auto":
	case "none":
		p.tools, p.parsed = nil, nil
	case "required":
		if len(p.parsed) == 0 {
			return badRequest("tool_choice requires a tool call, but there are no tools", "tool_choice")
		} // the grammar starts the answer at <tool_call> (constrain.go)
	case "named":
		found := false
		for _, tool := range p.parsed {
			found = found || tool.Name == t.choice.name
		}
		if !found {
			return badRequest(fmt.Sprintf("tool_choice names %q, which is not in tools", t.choice.name), "tool_choice")
		}
		p.force = parse.CallOpening(t.choice.name)
	default:
		return badRequest(fmt.Sprintf("tool_choice %q is not known", t.choice.mode), "tool_choice")
	}
	return nil
}

// thinkingEnabled decides whether the model thinks.
func thinkingEnabled(t *turn) (bool, error) {
	if t.thinking != nil {
		return *t.thinking, nil
	}
	if raw, ok := t.kwargs["enable_thinking"]; ok {
		var on bool
		if err := json.Unmarshal(raw, &on); err != nil {
			return false, badRequest("chat_template_kwargs.enable_thinking must be a boolean", "chat_template_kwargs")
		}
		return on, nil
	}
	if t.effort != nil {
		if *t.effort == "none" {
			return false, nil
		}
		if !knownEffort(*t.effort) {
			return false, badRequest(fmt.Sprintf("reasoning_effort %q: expected none, minimal, low, medium, high, xhigh or max", *t.effort), "reasoning_effort")
		}
	}
	return true, nil
}

// effortBudgets is what a reasoning effort means for Qwen, which has no effort setting of its
// own: a budget of reasoning tokens, after which the server closes the reasoning (0: none, the
// model reasons as long as it wants). "none" turns thinking off.
var effortBudgets = map[string]int{"minimal": 256, "low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768, "max": 0}

// knownEffort reports whether e is one of the reasoning efforts (effortBudgets, or "none").
func knownEffort(e string) bool {
	_, ok := effortBudgets[e]
	return ok || e == "none"
}

// thinkingBudget is the turn's reasoning budget in tokens (0: none).
func thinkingBudget(t *turn) (int, error) {
	if t.budget != nil {
		if *t.budget < 1 {
			return 0, badRequest("the thinking budget must be at least 1 token", "thinking_budget")
		}
		return *t.budget, nil
	}
	if t.effort != nil {
		return effortBudgets[*t.effort], nil
	}
	return 0, nil
}

// prepareTurn renders the conversation (normalised, chat.Normalize), encodes it and sizes the
// completion against the context.
func (s *Server) prepareTurn(ctx context.Context, m *Model, p *turnPlan) error {
	if err := s.imagesInPrompt(ctx, m, p); err != nil {
		return err
	}
	var err error
	if p.text, err = renderTurn(m, p); err != nil {
		return err
	}
	p.t.messages = nil // the rendered text replaces it; let a long conversation be collected
	ids, err := encodePrompt(m, p.text)
	if err != nil {
		return err
	}
	if p.g.prompt, p.g.images, err = expandImages(m, ids, p.images); err != nil {
		return err
	}
	if p.g.maxTokens, err = s.budget(m, len(p.g.prompt), p.t.maxTokens...); err != nil {
		return err
	}
	p.g.checkpoints = turnCheckpoints(m, p.g.prompt)
	p.g.steer, err = p.steer(m)
	return err
}

// forcedCall reports whether tool_choice demands a call (required or a named function).
func (p *turnPlan) forcedCall() bool {
	return p.t.choice.mode == "required" || p.t.choice.mode == "named"
}

// promptEndsInThink reports whether the prompt opens a reasoning block for the answer.
func (p *turnPlan) promptEndsInThink() bool {
	return p.thinking && parse.OpensReasoning(p.text)
}

// renderTurn renders a planned turn's conversation through the model's chat template.
func renderTurn(m *Model, p *turnPlan) (string, error) {
	if p.t.prompt != nil {
		return *p.t.prompt, nil
	}
	msgs, err := chat.Normalize(p.t.messages)
	if err != nil {
		return "", templateError(err)
	}
	end, err := chat.ResolveEnding(p.t.addGen, p.t.cont, p.t.kwargs, chat.EndsWithAssistant(msgs))
	if err != nil {
		return "", templateError(err)
	}
	if end.ContinueFinal && p.forcedCall() {
		return "", badRequest("a forced tool call cannot continue a final assistant message", "tool_choice")
	}
	kwargs := map[string]json.RawMessage{}
	for k, v := range p.t.kwargs {
		kwargs[k] = v
	}
	kwargs["enable_thinking"] = json.RawMessage(fmt.Sprint(p.thinking))
	text, err := m.Template.Render(RenderRequest{Messages: msgs, Tools: p.tools, AddGenerationPrompt: end.AddGenerationPrompt, ContinueFinal: end.ContinueFinal, Kwargs: kwargs})
	if err != nil {
		return "", templateError(err)
	}
	return text + p.force, nil
}

// templateError makes the template's and the normaliser's complaints about a conversation 400s.
func templateError(err error) error {
	var te *TemplateError
	var ie *chat.InputError
	switch {
	case errors.As(err, &te):
		return badRequest("chat template: "+te.Msg, "messages")
	case errors.As(err, &ie):
		return badRequest(strings.TrimPrefix(ie.Error(), "chat: "), "messages")
	}
	return fmt.Errorf("chat template: %w", err)
}

// parser starts the output parser of a prepared turn, with the deltas the prompt already holds
// (a forced call's opening is part of the answer).
func (p *turnPlan) parser() (*parse.Stream, []parse.Delta) {
	ps := parse.NewStream(parse.Options{PromptEndsInThink: p.promptEndsInThink(), Tools: p.parsed, NewID: p.t.callID})
	var pending []parse.Delta
	if p.force != "" {
		pending = ps.Feed(p.force)
	}
	return ps, pending
}

// runTurn generates a prepared turn, passing to out (which may be nil) the deltas the prompt
// holds (a forced call's opening), then the parsed deltas of the output with the tokens they
// complete, and returns the whole answer.
func (s *Server) runTurn(ctx context.Context, m *Model, p *turnPlan, out func([]parse.Delta, textPiece) error) (genOutcome, parse.Result, error) {
	ps, opening := p.parser()
	a := &answer{st: stopper{stops: p.stops}, out: out}
	if err := a.send(opening, textPiece{}); err != nil {
		return genOutcome{}, parse.Result{}, err
	}
	reasoning := 0
	o, err := s.generate(ctx, m, p.g, func(piece textPiece) (bool, error) {
		d := ps.Feed(piece.Text)
		if slices.ContainsFunc(d, func(x parse.Delta) bool { return x.Reasoning != "" }) {
			reasoning += piece.Count
		}
		err := a.send(d, piece)
		return a.stopped, err
	})
	o.reasoningTokens, o.stopSeq = reasoning, a.st.hit
	if err == nil && !a.stopped {
		if err = a.send(ps.Finish(), textPiece{}); err == nil {
			err = a.end()
		}
	}
	r := ps.Result()
	r.Content = a.content.String()
	return o, r, err
}

// answer is a turn's output on its way to the client. Stop strings apply to the answer's text
// only (content): never to the reasoning or a call's markup, so a stop string cannot cut a tool
// call. The tokens of text the stopper holds back wait with it.
type answer struct {
	st      stopper
	out     func([]parse.Delta, textPiece) error // nil: nothing streams
	content strings.Builder
	tokens  textPiece // tokens whose text has not gone out yet
	stopped bool      // a stop string ended the answer
}

// send passes the parser's deltas on, content through the stopper.
func (a *answer) send(in []parse.Delta, piece textPiece) error {
	a.tokens.Tokens = append(a.tokens.Tokens, piece.Tokens...)
	a.tokens.Count += piece.Count
	var d []parse.Delta
	for _, x := range in {
		if x.Content == "" { // reasoning or a call: what the stopper holds is final
			d = append(a.text(d, a.st.flush().Text), x)
			continue
		}
		p, done := a.st.piece(textPiece{Text: x.Content})
		d = a.text(d, p.Text)
		if a.stopped = done; done {
			break
		}
	}
	return a.emit(d)
}

// end releases what the stopper held at the end of the output.
func (a *answer) end() error { return a.emit(a.text(nil, a.st.flush().Text)) }

func (a *answer) text(d []parse.Delta, s string) []parse.Delta {
	if s == "" {
		return d
	}
	a.content.WriteString(s)
	return append(d, parse.Delta{Content: s})
}

// emit sends d with the waiting tokens, unless nothing is to be sent or their text is held.
func (a *answer) emit(d []parse.Delta) error {
	if a.out == nil || len(d) == 0 && (a.st.holding() || len(a.tokens.Tokens) == 0) {
		return nil
	}
	t := a.tokens
	a.tokens = textPiece{}
	return a.out(d, t)
}

// planned is the front of every chat endpoint: the served model, preparation budget, the request
// read into a turn, the cheap checks. A nil plan means the request is answered (or gone); else
// the caller ends the admission.
func (s *Server) planned(c *gin.Context, read func() (*turn, error)) (*Model, *admission, *turnPlan) {
	m := s.ready(c)
	if m == nil {
		return nil, nil, nil
	}
	a, ok := s.startAdmission(c)
	if !ok {
		return nil, nil, nil
	}
	t, err := read()
	if err == nil && t != nil {
		var p *turnPlan
		if p, err = s.planTurn(m, t); err == nil {
			return m, a, p
		}
	}
	if err != nil {
		abortWith(c, err)
	}
	a.end()
	return nil, nil, nil
}

// eachDelta is a runTurn callback that sends the deltas one by one, for dialects that stream
// nothing else (no logprobs).
func eachDelta(send func(parse.Delta) error) func([]parse.Delta, textPiece) error {
	return func(deltas []parse.Delta, _ textPiece) error {
		for _, d := range deltas {
			if err := send(d); err != nil {
				return err
			}
		}
		return nil
	}
}

// serveTurn is the one path of every chat dialect: preparation budget, the request read into a
// turn, the cheap checks, a place in the queue, rendering and budgeting, then the dialect's
// answer under the generation's context. read may answer the request itself (Ollama's load
// request: no turn to run) and return a nil turn.
func (s *Server) serveTurn(c *gin.Context, read func() (*turn, error), answer func(ctx context.Context, m *Model, p *turnPlan)) {
	m, a, p := s.planned(c, read)
	if p == nil {
		return
	}
	defer a.end()
	if !a.enqueue() {
		return
	}
	if err := s.prepareTurn(c.Request.Context(), m, p); err != nil {
		abortWith(c, err)
		return
	}
	ctx, ticket := a.admitted()
	p.g.ticket = ticket
	answer(ctx, m, p)
}
