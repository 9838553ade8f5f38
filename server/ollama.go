package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lilyformac/lily/engine/parse"
)

// The Ollama API (/api/…): what Ollama's SDKs and the apps built for Ollama speak (Open WebUI,
// editors' Ollama providers, VS Code Copilot's "Ollama" models). /api/chat and /api/generate
// become a neutral turn, its output Ollama's JSON lines. The listings describe the one served
// model, which answers to any name (with or without :latest), as /v1/models/{id} does; model
// management (pull, create, delete, …) and embeddings get a 400 that says why.

// ollamaVersion is the Ollama version Lily claims: clients gate features on it (VS Code
// Copilot wants at least 0.6.4).
const ollamaVersion = "0.12.0"

// ollamaArch names the architecture in Ollama's words (a Qwen3 mixture of experts).
const ollamaArch = "qwen3moe"

var ollamaCapabilities = []string{"completion", "tools", "thinking"}

// capabilities are a model's Ollama capabilities: "vision" when it sees images.
func capabilities(m *Model) []string {
	if m.Images != nil {
		return append(slices.Clone(ollamaCapabilities), "vision")
	}
	return ollamaCapabilities
}

// ollamaForever is the expiry /api/ps reports: the model stays loaded while Lily runs.
var ollamaForever = time.Date(2999, 12, 31, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)

// ollamaRoutes adds the Ollama endpoints to the group that checks the API key.
func (s *Server) ollamaRoutes(api *gin.RouterGroup) {
	version := func(c *gin.Context) { reply(c, http.StatusOK, gin.H{"version": ollamaVersion}) }
	api.GET("/api/version", version)
	api.HEAD("/api/version", version) // HEAD too, as Ollama answers it (clients probe with it)
	api.GET("/api/tags", s.ollamaTags)
	api.HEAD("/api/tags", s.ollamaTags)
	api.GET("/api/ps", s.ollamaPS)
	api.POST("/api/show", s.ollamaShow)
	api.POST("/api/chat", s.ollamaChat)
	api.POST("/api/generate", s.ollamaGenerate)
	api.POST("/api/embed", s.ollamaNoEmbeddings)
	api.POST("/api/embeddings", s.ollamaNoEmbeddings)
	for _, path := range []string{"/api/pull", "/api/push", "/api/create", "/api/copy"} {
		api.POST(path, s.ollamaNoManagement)
	}
	api.DELETE("/api/delete", s.ollamaNoManagement)
	api.Any("/api/blobs/*digest", s.ollamaNoManagement)
}

// ollamaRoot answers Ollama's liveness probe (GET or HEAD /), which its clients check first.
func ollamaRoot(c *gin.Context) { c.String(http.StatusOK, "Ollama is running") }

type ollamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// ollamaModel is a model in /api/tags (modified_at, capabilities) or /api/ps (expires_at,
// size_vram).
type ollamaModel struct {
	Name          string        `json:"name"`
	Model         string        `json:"model"`
	ModifiedAt    string        `json:"modified_at,omitempty"`
	Size          int64         `json:"size"`
	Digest        string        `json:"digest"`
	Details       ollamaDetails `json:"details"`
	Capabilities  []string      `json:"capabilities,omitempty"`
	ContextLength int           `json:"context_length"`
	ExpiresAt     string        `json:"expires_at,omitempty"`
	SizeVRAM      *int64        `json:"size_vram,omitempty"`
}

// ollamaDetailsOf describes m; every checkpoint Lily loads is 4-bit (engine/config accepts no
// other quantization).
func ollamaDetailsOf(m *Model) ollamaDetails {
	return ollamaDetails{Format: "safetensors", Family: ollamaArch, Families: []string{ollamaArch}, ParameterSize: m.Params, QuantizationLevel: "Q4"}
}

func (s *Server) ollamaModelOf(m *Model) ollamaModel {
	sum := sha256.Sum256([]byte(m.ID)) // stable while the served model is
	return ollamaModel{Name: m.ID, Model: m.ID, ModifiedAt: s.started.UTC().Format(time.RFC3339), Size: m.Size,
		Digest: hex.EncodeToString(sum[:]), Details: ollamaDetailsOf(m), Capabilities: capabilities(m), ContextLength: m.Context}
}

func (s *Server) ollamaTags(c *gin.Context) {
	if m := s.ready(c); m != nil {
		reply(c, http.StatusOK, gin.H{"models": []ollamaModel{s.ollamaModelOf(m)}})
	}
}

// ollamaPS lists the loaded model: none while it loads.
func (s *Server) ollamaPS(c *gin.Context) {
	models := []ollamaModel{}
	if m := s.model.Load(); m != nil {
		e := s.ollamaModelOf(m)
		e.ModifiedAt, e.Capabilities, e.ExpiresAt, e.SizeVRAM = "", nil, ollamaForever, &m.Size
		models = append(models, e)
	}
	reply(c, http.StatusOK, gin.H{"models": models})
}

// ollamaShow describes the served model, whatever name is asked for; model_info carries what
// clients read of it (the architecture and the context length).
func (s *Server) ollamaShow(c *gin.Context) {
	m := s.ready(c)
	if m == nil {
		return
	}
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"` // the older name of the field
	}
	if err := decodeBody(c, &req); err != nil {
		abortWith(c, err)
		return
	}
	reply(c, http.StatusOK, gin.H{"modelfile": "", "parameters": "", "template": "", "details": ollamaDetailsOf(m),
		"model_info":   gin.H{"general.architecture": ollamaArch, "general.basename": m.ID, ollamaArch + ".context_length": m.Context},
		"capabilities": capabilities(m), "modified_at": s.started.UTC().Format(time.RFC3339)})
}

// ollamaName is the model name an answer carries: the one asked for, else the served model's.
func (s *Server) ollamaName(asked string) string {
	if m := s.model.Load(); asked == "" && m != nil {
		return m.ID
	}
	return asked
}

func (s *Server) ollamaNoEmbeddings(c *gin.Context) {
	var req struct {
		Model string `json:"model"`
	}
	decodeBody(c, &req) // only for the name in the message
	abortWith(c, badRequest(fmt.Sprintf("%q does not support embeddings", s.ollamaName(req.Model)), "model"))
}

func (s *Server) ollamaNoManagement(c *gin.Context) {
	name := "its model"
	if m := s.model.Load(); m != nil {
		name = m.ID
	}
	abortWith(c, badRequest(fmt.Sprintf("%s %s is not supported: Lily serves one model (%s) and does not manage models through the Ollama API; download it with `lily pull`",
		c.Request.Method, c.Request.URL.Path, name), ""))
}

// ollamaCommon are the fields /api/chat and /api/generate share.
type ollamaCommon struct {
	Model     string          `json:"model"`
	Format    json.RawMessage `json:"format"`
	Options   ollamaOptions   `json:"options"`
	Stream    *bool           `json:"stream"` // absent: true
	Think     json.RawMessage `json:"think"`
	KeepAlive json.RawMessage `json:"keep_alive"` // read only for a load request's done_reason
}

// ollamaOptions are the options Lily reads (temperature, top_p, top_k, min_p, seed, stop,
// presence_penalty and frequency_penalty under their OpenAI names); the others (num_gpu,
// mirostat, …) have no meaning here and are ignored.
type ollamaOptions struct {
	samplingFields
	NumPredict    *int     `json:"num_predict"`
	NumCtx        *int     `json:"num_ctx"` // the context is the server's: only checked
	RepeatPenalty *float32 `json:"repeat_penalty"`
}

// turn is the turn of messages (OpenAI-shaped) under the request's settings.
func (o *ollamaCommon) turn(messages json.RawMessage) (*turn, error) {
	opt := o.Options
	if opt.NumCtx != nil && *opt.NumCtx < 0 {
		return nil, badRequest("options.num_ctx must not be negative", "options.num_ctx")
	}
	sampling := opt.samplingFields
	sampling.RepetitionPenalty = cmp.Or(opt.RepeatPenalty, sampling.RepetitionPenalty)
	if sampling.Seed != nil && *sampling.Seed < 0 {
		sampling.Seed = nil // Ollama's -1: a random seed
	}
	var limit *int
	if opt.NumPredict != nil && *opt.NumPredict > 0 {
		limit = opt.NumPredict // -1, -2 and (as in Ollama's runner) 0: up to the context's room
	}
	think, err := ollamaThink(o.Think)
	if err != nil {
		return nil, err
	}
	format, err := ollamaFormat(o.Format)
	if err != nil {
		return nil, err
	}
	return &turn{messages: messages, sampling: sampling, maxTokens: []*int{limit}, thinking: think, format: format}, nil
}

// ollamaThink reads think: a boolean or an effort level (any level: on); absent, the template's
// default (on).
func ollamaThink(raw json.RawMessage) (*bool, error) {
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var on bool
	if json.Unmarshal(raw, &on) == nil {
		return &on, nil
	}
	var level string
	if json.Unmarshal(raw, &level) == nil && (level == "low" || level == "medium" || level == "high") {
		on = true
		return &on, nil
	}
	return nil, badRequest(`think must be true, false, "low", "medium" or "high"`, "think")
}

// ollamaFormat reads format: "json" or a JSON schema.
func ollamaFormat(raw json.RawMessage) (outputFormat, error) {
	switch raw = bytes.TrimSpace(raw); {
	case len(raw) == 0 || string(raw) == "null" || string(raw) == `""`:
		return outputFormat{}, nil
	case string(raw) == `"json"`:
		return outputFormat{kind: "json_object"}, nil
	case raw[0] == '{':
		return outputFormat{kind: "json_schema", schema: raw}, nil
	}
	return outputFormat{}, badRequest(`format must be "json" or a JSON schema object`, "format")
}

// ollamaUnloads reports whether keep_alive is zero (a number of seconds, or a duration string).
func ollamaUnloads(raw json.RawMessage) bool {
	var secs float64
	if json.Unmarshal(raw, &secs) == nil {
		return secs == 0
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return f == 0
	}
	d, err := time.ParseDuration(s)
	return err == nil && d == 0
}

// ollamaContent is a message's text followed by its images (base64, as Ollama sends them).
func ollamaContent(text string, imgs []json.RawMessage) *content {
	var c content
	c.addText(text)
	for _, raw := range imgs {
		var b64 string
		if json.Unmarshal(raw, &b64) != nil || b64 == "" {
			c.addText(imagePlaceholder("an Ollama image must be a base64 string"))
			continue
		}
		c.addImage(dataURL("", b64))
	}
	return &c
}

// ollamaMessage is a chat message, in a request and in an answer.
type ollamaMessage struct {
	Role       string            `json:"role"`
	Content    string            `json:"content"`
	Thinking   string            `json:"thinking,omitempty"`
	Images     []json.RawMessage `json:"images,omitempty"`
	ToolCalls  []ollamaToolCall  `json:"tool_calls,omitempty"`
	ToolName   string            `json:"tool_name,omitempty"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
}

type ollamaToolCall struct {
	ID       string `json:"id,omitempty"`
	Function struct {
		Index     int             `json:"index"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"` // an object
	} `json:"function"`
}

type ollamaChatRequest struct {
	ollamaCommon
	Messages []ollamaMessage `json:"messages"`
	Tools    json.RawMessage `json:"tools"` // OpenAI's shape already
}

func (req *ollamaChatRequest) turn() (*turn, error) {
	msgs, err := openAIFromOllama(req.Messages)
	if err != nil {
		return nil, err
	}
	t, err := req.ollamaCommon.turn(msgs)
	if err != nil {
		return nil, err
	}
	t.tools = req.Tools
	return t, nil
}

// openAIFromOllama translates chat messages into OpenAI's: thinking is reasoning_content, a
// call's arguments object becomes JSON text under an id (the template needs none; OpenAI's
// shape has one), a tool message keeps its tool_call_id if it has one (tool_name has no place).
func openAIFromOllama(msgs []ollamaMessage) (json.RawMessage, error) {
	out := make([]oaMessage, 0, len(msgs))
	for i, m := range msgs {
		om := oaMessage{Role: m.Role, ToolCallID: m.ToolCallID}
		ollamaContent(m.Content, m.Images).set(&om)
		if m.Role == "assistant" {
			om.ReasoningContent = m.Thinking
		}
		for j, tc := range m.ToolCalls {
			args, err := ollamaArguments(tc.Function.Arguments)
			if err != nil {
				return nil, badRequest(fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments %v", i, j, err), "messages")
			}
			call := oaToolCall{ID: cmp.Or(tc.ID, newID("call_")), Type: "function"}
			call.Function.Name, call.Function.Arguments = tc.Function.Name, args
			om.ToolCalls = append(om.ToolCalls, call)
		}
		out = append(out, om)
	}
	return json.Marshal(out)
}

// ollamaArguments is a call's arguments as JSON text: Ollama sends an object, some clients a
// string holding one.
func ollamaArguments(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	var text string
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "{}", nil
	case json.Unmarshal(raw, &text) == nil:
		return text, nil
	case raw[0] != '{':
		return "", fmt.Errorf("must be an object")
	}
	return string(raw), nil
}

func (s *Server) ollamaChat(c *gin.Context) {
	start := time.Now()
	var req ollamaChatRequest
	s.serveTurn(c, func() (*turn, error) {
		if err := decodeBody(c, &req); err != nil {
			return nil, err
		}
		if len(req.Messages) == 0 {
			s.ollamaLoaded(c, &req.ollamaCommon, true)
			return nil, nil
		}
		return req.turn()
	}, s.ollamaAnswer(c, &req.ollamaCommon, start, true))
}

type ollamaGenerateRequest struct {
	ollamaCommon
	Prompt   string            `json:"prompt"`
	Suffix   string            `json:"suffix"`
	System   string            `json:"system"`
	Template string            `json:"template"`
	Raw      bool              `json:"raw"`
	Images   []json.RawMessage `json:"images"`
}

// turn is a one-message conversation (with the system prompt, if any), or with raw the prompt
// as it is.
func (req *ollamaGenerateRequest) turn() (*turn, error) {
	switch {
	case req.Suffix != "":
		return nil, badRequest("suffix is not supported (no fill-in-the-middle)", "suffix")
	case req.Template != "":
		return nil, badRequest("template is not supported: the model's own chat template renders the prompt (send raw: true with a prompt already rendered)", "template")
	case req.Raw:
		for range req.Images { // a raw prompt has no place the template would put an image
			req.Prompt += imagePlaceholder("a raw prompt cannot hold images")
		}
		t, err := req.ollamaCommon.turn(nil)
		if t != nil {
			t.prompt = &req.Prompt
		}
		return t, err
	}
	var msgs []oaMessage
	if req.System != "" {
		msgs = append(msgs, oaMessage{Role: "system", Content: req.System})
	}
	user := oaMessage{Role: "user"}
	ollamaContent(req.Prompt, req.Images).set(&user)
	raw, err := json.Marshal(append(msgs, user))
	if err != nil {
		return nil, err
	}
	return req.ollamaCommon.turn(raw)
}

func (s *Server) ollamaGenerate(c *gin.Context) {
	start := time.Now()
	var req ollamaGenerateRequest
	s.serveTurn(c, func() (*turn, error) {
		if err := decodeBody(c, &req); err != nil {
			return nil, err
		}
		if req.Prompt == "" {
			s.ollamaLoaded(c, &req.ollamaCommon, false)
			return nil, nil
		}
		return req.turn()
	}, s.ollamaAnswer(c, &req.ollamaCommon, start, false))
}

// ollamaLoaded answers a request with nothing to generate, which Ollama's clients send to load
// a model (or, with keep_alive 0, to unload it): here it is loaded while the server runs.
func (s *Server) ollamaLoaded(c *gin.Context, o *ollamaCommon, chat bool) {
	oc := &ollamaCall{model: s.ollamaName(o.Model), chat: chat}
	p := oc.part("", "", nil)
	p.Done, p.ollamaDone = true, &ollamaDone{DoneReason: "load"}
	if ollamaUnloads(o.KeepAlive) {
		p.DoneReason = "unload"
	}
	reply(c, http.StatusOK, p)
}

// ollamaAnswer answers a planned chat or generate turn, streamed unless stream is false.
func (s *Server) ollamaAnswer(c *gin.Context, o *ollamaCommon, start time.Time, chat bool) func(context.Context, *Model, *turnPlan) {
	return func(ctx context.Context, m *Model, p *turnPlan) {
		oc := &ollamaCall{s: s, m: m, model: cmp.Or(o.Model, m.ID), start: start, chat: chat}
		if o.Stream == nil || *o.Stream {
			oc.stream(c, ctx, p)
		} else {
			oc.once(c, ctx, p)
		}
	}
}

// ollamaPart is one line of an answer (or the whole of one): chat's message, or generate's
// response and thinking; the last has how it ended and Ollama's counts and timings.
type ollamaPart struct {
	Model     string         `json:"model"`
	CreatedAt string         `json:"created_at"`
	Message   *ollamaMessage `json:"message,omitempty"`
	Response  *string        `json:"response,omitempty"`
	Thinking  string         `json:"thinking,omitempty"`
	Done      bool           `json:"done"`
	*ollamaDone
}

// ollamaDone ends an answer; the durations are in nanoseconds, as time.Duration marshals.
type ollamaDone struct {
	DoneReason         string        `json:"done_reason"`
	TotalDuration      time.Duration `json:"total_duration"`
	LoadDuration       time.Duration `json:"load_duration"`
	PromptEvalCount    int           `json:"prompt_eval_count"`
	PromptEvalDuration time.Duration `json:"prompt_eval_duration"`
	EvalCount          int           `json:"eval_count"`
	EvalDuration       time.Duration `json:"eval_duration"`
}

// ollamaCall carries one chat or generate answer.
type ollamaCall struct {
	s     *Server
	m     *Model
	model string // the name the answer carries
	start time.Time
	chat  bool            // message objects (chat) or response text (generate)
	call  *parse.ToolCall // the tool call a stream is receiving
}

// part is a line with this text, thinking and tool calls (generate has no tools, so no calls).
func (oc *ollamaCall) part(content, thinking string, calls []parse.ToolCall) ollamaPart {
	p := ollamaPart{Model: oc.model, CreatedAt: time.Now().UTC().Format(time.RFC3339Nano)}
	if !oc.chat {
		p.Response, p.Thinking = &content, thinking
		return p
	}
	p.Message = &ollamaMessage{Role: "assistant", Content: content, Thinking: thinking}
	for _, tc := range calls {
		var out ollamaToolCall
		out.ID = tc.ID
		out.Function.Index, out.Function.Name, out.Function.Arguments = tc.Index, tc.Name, input(tc.Arguments)
		p.Message.ToolCalls = append(p.Message.ToolCalls, out)
	}
	return p
}

// done makes p the last line: how generation ended, the prompt and output counts, the timings.
func (oc *ollamaCall) done(p ollamaPart, o genOutcome) ollamaPart {
	p.Done = true
	p.ollamaDone = &ollamaDone{DoneReason: o.finish, TotalDuration: time.Since(oc.start), PromptEvalCount: o.res.PromptTokens,
		PromptEvalDuration: o.res.Prefill, EvalCount: len(o.res.Tokens), EvalDuration: o.res.Decode}
	return p
}

func (oc *ollamaCall) once(c *gin.Context, ctx context.Context, p *turnPlan) {
	o, r, err := oc.s.runTurn(ctx, oc.m, p, nil)
	if err != nil {
		failPlain(c, ctx, err)
		return
	}
	reply(c, http.StatusOK, oc.done(oc.part(r.Content, r.Reasoning, r.ToolCalls), o))
}

// stream sends the answer as JSON lines; a failure is a last {"error": …} line.
func (oc *ollamaCall) stream(c *gin.Context, ctx context.Context, p *turnPlan) {
	w := startNDJSON(c)
	defer w.end()
	o, _, err := oc.s.runTurn(ctx, oc.m, p, eachDelta(func(d parse.Delta) error { return oc.send(w, d) }))
	if err == nil {
		err = oc.flushCall(w)
	}
	if err != nil {
		w.line(gin.H{"error": generationError(ctx, err).Error()})
		return
	}
	w.line(oc.done(oc.part("", "", nil), o))
}

// send streams one parser delta. A tool call goes out whole, once the next output begins:
// Ollama's clients read each call's arguments as one object.
func (oc *ollamaCall) send(w *sseWriter, d parse.Delta) error {
	if tc := d.ToolCall; tc != nil && tc.ID == "" && oc.call != nil {
		oc.call.Arguments += tc.Arguments
		return nil
	}
	if err := oc.flushCall(w); err != nil {
		return err
	}
	switch {
	case d.ToolCall != nil:
		oc.call = &parse.ToolCall{Index: d.ToolCall.Index, ID: d.ToolCall.ID, Name: d.ToolCall.Name, Arguments: d.ToolCall.Arguments}
	case d.Reasoning != "":
		return w.line(oc.part("", d.Reasoning, nil))
	case d.Content != "":
		return w.line(oc.part(d.Content, "", nil))
	}
	return nil
}

// flushCall sends the tool call received so far, if any.
func (oc *ollamaCall) flushCall(w *sseWriter) error {
	if oc.call == nil {
		return nil
	}
	call := *oc.call
	oc.call = nil
	return w.line(oc.part("", "", []parse.ToolCall{call}))
}
