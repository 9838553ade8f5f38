// Package server is Lily's HTTP API: OpenAI-compatible chat and text completions and Responses
// (streaming and not), the Anthropic Messages API, the Ollama API (/api/chat, /api/generate,
// model listings), models, health, Prometheus metrics and the status the menu-bar app reads.
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/grammar"
	"github.com/lilyformac/lily/engine/images"
	"github.com/lilyformac/lily/engine/prefixcache"
	"github.com/lilyformac/lily/engine/runner"
)

// Tokenizer is what the server needs from the model's tokenizer.
type Tokenizer interface {
	Encode(text string) []int
	// EncodeLimit stops once text has more than limit tokens (ok=false).
	EncodeLimit(text string, limit int) (ids []int, ok bool)
	Decode(ids []int) string
	NewStream() TextStream
	VocabSize() int
	TokenID(token string) (int, bool)
}

// TextStream turns ids into text as they arrive, only on UTF-8 boundaries.
type TextStream interface {
	Add(id int) string
	Flush() string
}

// Template renders chat messages (raw OpenAI JSON) into a prompt.
type Template interface {
	Render(RenderRequest) (string, error)
}

// RenderRequest is one render: messages, tools, how the prompt ends, chat_template_kwargs.
type RenderRequest = chat.Request

// TemplateError is an error the chat template raised on purpose (bad conversation shape): a 400.
type TemplateError struct{ Msg string }

func (e *TemplateError) Error() string { return e.Msg }

// Model is a loaded, servable model.
type Model struct {
	ID        string
	Runner    *runner.Runner
	Tokenizer Tokenizer
	Template  Template
	StopIDs   []int // end-of-turn ids: generation ends there and they are not shown
	Context   int   // maximum positions (prompt + output)
	// ContextWhy says why Context is below the model's own (a GPU's memory), or "".
	ContextWhy string
	// Size and Params describe the checkpoint where a listing shows them (Ollama's /api/tags):
	// its weights' bytes on disk and its parameter count as "35B"; 0 and "" when not known.
	Size   int64
	Params string
	// Vocab is the vocabulary grammars mask (constrained decoding), built on first use; nil:
	// constrained output is refused.
	Vocab func() (*grammar.Vocab, error)
	// Memory is the bytes the engine holds for this model, as /status reports it (nil: unknown).
	Memory func() int64
	// Images encodes the images of prompts (nil: none can be seen; VisionWhy says why, and each
	// image becomes a placeholder saying so).
	Images    *images.Encoder
	VisionWhy string
	// Prefill is the route the backend's batched prefill takes and why ("tensor: …", as
	// /status's prefill_route reports it); "" where there is none (the cpu backend).
	Prefill string
}

// Config holds the server's limits and security settings. Zero values take the defaults New
// names, except QueueLimit, which is used as given.
type Config struct {
	APIKey       string
	CORSOrigins  []string // browser origins allowed besides the defaults: exact, "scheme://*", or "*"
	AllowedHosts []string // Host names accepted besides this machine's: exact, ".domain" (it and its subdomains), or "*"
	BindHost     string   // the address the listener is bound to ("" or loopback: this machine only)
	MaxBodyBytes int64    // largest request body (default 64 MiB: agents resend every image each turn)
	QueueLimit   int      // requests that may wait while the model's Parallel generate; more get 429 (0: none may wait)
	// MaxOutputTokens caps every answer's tokens, whatever the request asks (0: the context's room).
	MaxOutputTokens int
	RequestTimeout  time.Duration
	StallTimeout    time.Duration // a client that accepts no response bytes, or sends no more of its body, for this long is dropped (default 30 s)
	IdleTimeout     time.Duration // an idle keep-alive connection is closed after this (default 2 min)
	KeepAlive       time.Duration // SSE comment interval while a request waits for its first token
	Status          func() any    // the lifecycle status (phase, progress, error); nil: derived from the model
	Retry           func() error  // restarts a failed startup (POST /status/retry); nil: not offered
	// IdleUnload releases the model after this long with no API request in flight (0: never);
	// it needs Load and Unload. The next request that needs the model waits for Load.
	IdleUnload time.Duration
	Unload     func()                          // frees the model (backend, disk tier) once the server has let it go and cleared its prefix cache
	Load       func(ctx context.Context) error // loads the model again and SetModels it
}

// Server serves one model.
type Server struct {
	cfg      Config
	model    atomic.Pointer[Model]
	sched    *scheduler
	prep     *prepBudget
	guard    *guard
	metrics  *metrics
	started  time.Time
	life     context.Context // cancelled (with errShuttingDown) by Drain
	drain    context.CancelCauseFunc
	handler  http.Handler
	observe  func(genRequest) // tests: sees each generation as admitted
	signer   thinkingSigner   // signs the thinking of Anthropic and Responses answers
	stored   *responseStore   // stored Responses answers
	grammars *grammar.Cache   // compiled response formats and tool grammars
	res      resident         // the model's residency: idle unloading and loading again
}

// New builds a server; SetModel makes it ready.
func New(cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	cfg.QueueLimit = max(cfg.QueueLimit, 0)
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Minute
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = 30 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 10 * time.Second
	}
	s := &Server{cfg: cfg, sched: newScheduler(cfg.QueueLimit), prep: newPrepBudget(cfg.MaxBodyBytes), started: time.Now()}
	s.stored, s.grammars = newResponseStore(), grammar.NewCache(64)
	s.signer.key = make([]byte, 32)
	rand.Read(s.signer.key)
	s.guard = newGuard(cfg.BindHost, cfg.AllowedHosts, cfg.CORSOrigins)
	s.life, s.drain = context.WithCancelCause(context.Background())
	s.metrics = newMetrics(s)
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery(), s.count, s.guard.check)
	r.GET("/health", s.health)
	r.GET("/", ollamaRoot) // Ollama's liveness probe: no key, like /health
	r.HEAD("/", ollamaRoot)
	api := r.Group("/", s.auth, s.limitBody, s.inFlight)
	api.GET("/status", s.status)
	api.POST("/status/retry", s.retry)
	api.POST("/status/load", s.loadModel)
	api.GET("/metrics", gin.WrapH(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})))
	api.GET("/v1/models", s.listModels)
	api.GET("/v1/models/*id", s.getModel)
	api.POST("/v1/chat/completions", s.chatCompletions)
	api.POST("/v1/completions", s.completions)
	api.POST("/v1/messages", s.messages)
	api.POST("/v1/messages/count_tokens", s.countTokens)
	api.POST("/v1/responses", s.responses)
	api.GET("/v1/responses/:id", s.getResponse)
	api.DELETE("/v1/responses/:id", s.deleteResponse)
	s.ollamaRoutes(api)
	r.NoRoute(func(c *gin.Context) {
		abortWith(c, &apiError{Status: http.StatusNotFound, Message: "unknown endpoint " + c.Request.Method + " " + c.Request.URL.Path, Type: "invalid_request_error", Code: strp("not_found")})
	})
	s.handler = r
	return s
}

// SetModel makes m the served model (nil: not ready).
func (s *Server) SetModel(m *Model) {
	s.model.Store(m)
	if m != nil && m.Runner != nil {
		s.sched.setSlots(m.Runner.Parallel())
	}
	s.published(m != nil)
}

// ServeHTTP implements http.Handler, with deadlines on the connection (see conn.go).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w, r, finish := s.withDeadlines(w, r)
	defer finish()
	s.handler.ServeHTTP(w, r)
}

// Drain starts a shutdown: running generations end now (a stream gets an error event and
// [DONE], a plain request a 503), and new ones are refused. http.Server.Shutdown then finds
// every handler returning at once.
func (s *Server) Drain() { s.drain(errShuttingDown) }

// parallel is how many generations run at once (0: no model yet).
func (s *Server) parallel() int {
	if m := s.model.Load(); m != nil && m.Runner != nil {
		return m.Runner.Parallel()
	}
	return 0
}

// load is the engine loop's own count of the sequences it runs and of the requests handed to it
// that wait for a place or for memory (runner.Runner.Load); the scheduler's slots would count a
// request the loop holds back for memory as running.
func (s *Server) load() (running, waiting int) {
	if m := s.model.Load(); m != nil && m.Runner != nil {
		return m.Runner.Load()
	}
	return 0, 0
}

func (s *Server) batched() (steps, rows int64) {
	if m := s.model.Load(); m != nil && m.Runner != nil {
		return m.Runner.Batched()
	}
	return 0, 0
}

func (s *Server) cacheStats() prefixcache.Stats {
	if m := s.model.Load(); m != nil && m.Runner != nil {
		return m.Runner.Cache().Stats()
	}
	return prefixcache.Stats{}
}

// imageStats are the served model's image encodes and encoded-image cache hits.
func (s *Server) imageStats() (encodes, hits int64) {
	if m := s.model.Load(); m != nil && m.Images != nil {
		return m.Images.Stats()
	}
	return 0, 0
}

func (s *Server) diskStats() prefixcache.DiskStats {
	if m := s.model.Load(); m != nil && m.Runner != nil && m.Runner.Disk() != nil {
		return m.Runner.Disk().Stats()
	}
	return prefixcache.DiskStats{}
}

// ready returns the served model, held until the request ends (loaded again first if it was
// unloaded for being idle), or answers 503 (with Retry-After) while there is none.
func (s *Server) ready(c *gin.Context) *Model {
	if s.life.Err() != nil {
		abortWith(c, errShuttingDown)
		return nil
	}
	m, err := s.hold(c)
	if err != nil {
		abortWith(c, err)
		return nil
	}
	if m == nil {
		e, _ := s.notReady()
		abortWith(c, e)
	}
	return m
}

// notReady says why there is no model: the startup phase, or its failure (failed).
func (s *Server) notReady() (e *apiError, failed bool) {
	ne := *errNotReady
	phase, failure := s.startup()
	switch {
	case failure != "":
		ne.Message = "the model could not be started: " + failure + " (POST /status/retry tries again)"
	case phase != "":
		ne.Message = fmt.Sprintf("the model is not ready yet (startup phase %s; GET /status shows progress)", phase)
	}
	return &ne, failure != ""
}

// startup reads the phase and error out of Config.Status.
func (s *Server) startup() (phase, failure string) {
	if s.cfg.Status == nil {
		return "", ""
	}
	var st struct{ Phase, Error string }
	if raw, err := json.Marshal(s.cfg.Status()); err == nil {
		json.Unmarshal(raw, &st)
	}
	return st.Phase, st.Error
}

// auth checks the API key, sent as `Authorization: Bearer <key>` (the scheme in any case, as
// RFC 9110 has it) or as `x-api-key` (Anthropic's clients).
func (s *Server) auth(c *gin.Context) {
	if s.cfg.APIKey == "" {
		return
	}
	got := c.GetHeader("x-api-key")
	if h := c.GetHeader("Authorization"); h != "" {
		scheme, token, _ := strings.Cut(strings.TrimSpace(h), " ")
		got = ""
		if strings.EqualFold(scheme, "bearer") {
			got = strings.TrimSpace(token)
		}
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) != 1 {
		abortWith(c, errUnauthorized)
	}
}

func (s *Server) limitBody(c *gin.Context) {
	if c.Request.ContentLength > s.cfg.MaxBodyBytes {
		abortWith(c, errTooLarge)
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, s.cfg.MaxBodyBytes)
}

func (s *Server) count(c *gin.Context) {
	c.Next()
	endpoint := c.FullPath()
	if endpoint == "" {
		endpoint = "unknown"
	}
	s.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(c.Writer.Status())).Inc()
}

// health answers at once, whatever the model is doing: 200 {"status":"ok"} once it can serve,
// 503 with the reason before (as llama-server does, so scripts can wait for a 200).
func (s *Server) health(c *gin.Context) {
	var e *apiError
	status := "loading"
	switch {
	case s.life.Err() != nil:
		status, e = "shutting_down", errShuttingDown
	case s.model.Load() != nil || s.residencyOf() != resStartup: // an unloaded model loads on the next request
		reply(c, http.StatusOK, gin.H{"status": "ok"})
		return
	default:
		var failed bool
		if e, failed = s.notReady(); failed {
			status = "error"
		}
	}
	setRetryAfter(c, e)
	c.Abort()
	reply(c, e.Status, gin.H{"status": status, "error": e})
}

// status is what the menu-bar app reads: the startup phase (from Config.Status) plus the served
// model, the memory it holds, the last decode speed and the queue depth; while the model is
// unloaded for being idle, phase unloaded (residencyStatus).
func (s *Server) status(c *gin.Context) {
	out := gin.H{}
	if s.cfg.Status != nil {
		raw, err := json.Marshal(s.cfg.Status())
		if err == nil {
			json.Unmarshal(raw, &out)
		}
	} else if s.model.Load() == nil {
		out["phase"] = "loading"
	} else {
		out["phase"] = "ready"
	}
	out["model"], out["context_length"], out["memory_bytes"] = nil, 0, int64(0)
	if m := s.model.Load(); m != nil {
		out["model"], out["context_length"] = m.ID, m.Context
		if m.ContextWhy != "" {
			out["context_note"] = m.ContextWhy
		}
		if m.Memory != nil {
			out["memory_bytes"] = m.Memory()
		}
		if m.Prefill != "" {
			out["prefill_route"] = m.Prefill
		}
		out["vision"] = m.Images != nil
		if m.Images == nil && m.VisionWhy != "" {
			out["vision_note"] = m.VisionWhy
		}
	}
	s.residencyStatus(out)
	out["decode_tokens_per_s"] = s.metrics.lastDecodeTokS()
	out["queue_depth"] = s.sched.depth()
	out["running"], out["waiting"] = s.load()
	out["parallel"] = s.parallel()
	if d := s.draftStatus(); d != nil {
		out["drafts"] = d
	}
	reply(c, http.StatusOK, out)
}

// retry restarts a failed startup, or a failed load after an idle unload; the client follows
// progress on /status.
func (s *Server) retry(c *gin.Context) {
	if s.loadFailure() != "" {
		s.loadModel(c)
		return
	}
	if s.cfg.Retry == nil {
		abortWith(c, badRequest("this server has no startup to retry", ""))
		return
	}
	if err := s.cfg.Retry(); err != nil {
		abortWith(c, &apiError{Status: http.StatusConflict, Message: err.Error(), Type: "invalid_request_error"})
		return
	}
	reply(c, http.StatusAccepted, gin.H{"status": "retrying"})
}

// modelCard is a model in OpenAI's shape and Anthropic's at once (no key means different
// things in the two: type, display_name and created_at are Anthropic's).
type modelCard struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Created       int64  `json:"created"`
	OwnedBy       string `json:"owned_by"`
	ContextLength int    `json:"context_length"`
	MaxModelLen   int    `json:"max_model_len"`
	Type          string `json:"type"`
	DisplayName   string `json:"display_name"`
	CreatedAt     string `json:"created_at"`
	// Capabilities are Ollama's names for what the model does ("vision": it sees images), and
	// InputModalities what a prompt may hold.
	Capabilities    []string `json:"capabilities"`
	InputModalities []string `json:"input_modalities"`
}

func (s *Server) card(m *Model) modelCard {
	return modelCard{ID: m.ID, Object: "model", Created: s.started.Unix(), OwnedBy: "lily", ContextLength: m.Context, MaxModelLen: m.Context,
		Type: "model", DisplayName: m.ID, CreatedAt: s.started.UTC().Format(time.RFC3339),
		Capabilities: capabilities(m), InputModalities: modalities(m)}
}

// modalities are what a prompt to m may hold.
func modalities(m *Model) []string {
	if m.Images != nil {
		return []string{"text", "image"}
	}
	return []string{"text"}
}

func (s *Server) listModels(c *gin.Context) {
	m := s.ready(c)
	if m == nil {
		return
	}
	reply(c, http.StatusOK, gin.H{"object": "list", "data": []modelCard{s.card(m)}, "has_more": false, "first_id": m.ID, "last_id": m.ID})
}

// getModel answers for any id: Lily serves one model under whatever name the client uses.
func (s *Server) getModel(c *gin.Context) {
	m := s.ready(c)
	if m == nil {
		return
	}
	card := s.card(m)
	if id := strings.TrimPrefix(c.Param("id"), "/"); id != "" {
		card.ID = id
	}
	reply(c, http.StatusOK, card)
}

// decodeBody reads a JSON request body into v with OpenAI-style errors. The body must be one
// JSON value: anything after it but white space is an error, not silently dropped.
func decodeBody(c *gin.Context, v any) error {
	dec := json.NewDecoder(c.Request.Body)
	err := dec.Decode(v)
	if err == nil {
		if _, next := dec.Token(); next != io.EOF {
			err = errors.New("unexpected data after the JSON value")
			if errors.As(next, new(*http.MaxBytesError)) {
				err = next
			}
		}
	}
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			return errTooLarge
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errBodyTimeout
		}
		return badRequest("invalid JSON body: "+err.Error(), "")
	}
	return nil
}
