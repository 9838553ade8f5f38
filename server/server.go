// Package server is Lily's HTTP API: OpenAI-compatible chat and text completions (streaming and
// not), models, health, Prometheus metrics and the status the menu-bar app reads.
package server

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lilyformac/lily/engine/runner"
)

// Tokenizer is what the server needs from the model's tokenizer.
type Tokenizer interface {
	Encode(text string) []int
	Decode(ids []int) string
	NewStream() TextStream
	VocabSize() int
}

// TextStream turns ids into text as they arrive, only on UTF-8 boundaries.
type TextStream interface {
	Add(id int) string
	Flush() string
}

// Template renders chat messages (raw OpenAI JSON) into a prompt.
type Template interface {
	Render(messages, tools json.RawMessage, addGenerationPrompt bool, kwargs map[string]json.RawMessage) (string, error)
}

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
}

// Config holds the server's limits and security settings.
type Config struct {
	APIKey         string
	CORSOrigins    []string // exact origins, or "*"
	MaxBodyBytes   int64
	QueueLimit     int
	RequestTimeout time.Duration
	KeepAlive      time.Duration // SSE comment interval while a request waits for its first token
	Status         func() any    // the lifecycle status (phase, progress, error); nil: derived from the model
	Retry          func() error  // restarts a failed startup (POST /status/retry); nil: not offered
}

// Server serves one model.
type Server struct {
	cfg     Config
	model   atomic.Pointer[Model]
	sched   *scheduler
	metrics *metrics
	started time.Time
	handler http.Handler
	observe func(genRequest) // tests: sees each generation as admitted
}

// New builds a server; SetModel makes it ready.
func New(cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 16 << 20
	}
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = 16
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Minute
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 10 * time.Second
	}
	s := &Server{cfg: cfg, sched: newScheduler(cfg.QueueLimit), started: time.Now()}
	s.metrics = newMetrics(s)
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery(), s.cors, s.count)
	r.GET("/health", s.health)
	api := r.Group("/", s.auth, s.limitBody)
	api.GET("/status", s.status)
	api.POST("/status/retry", s.retry)
	api.GET("/metrics", gin.WrapH(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})))
	api.GET("/v1/models", s.listModels)
	api.GET("/v1/models/*id", s.getModel)
	api.POST("/v1/chat/completions", s.chatCompletions)
	api.POST("/v1/completions", s.completions)
	r.NoRoute(func(c *gin.Context) {
		abortWith(c, &apiError{Status: http.StatusNotFound, Message: "unknown endpoint " + c.Request.Method + " " + c.Request.URL.Path, Type: "invalid_request_error", Code: strp("not_found")})
	})
	s.handler = r
	return s
}

// SetModel makes m the served model (nil: not ready).
func (s *Server) SetModel(m *Model) { s.model.Store(m) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *Server) cacheStats() runner.Stats {
	if m := s.model.Load(); m != nil && m.Runner != nil {
		return m.Runner.Cache().Stats()
	}
	return runner.Stats{}
}

func (s *Server) ready(c *gin.Context) *Model {
	m := s.model.Load()
	if m == nil {
		abortWith(c, errNotReady)
	}
	return m
}

func (s *Server) auth(c *gin.Context) {
	if s.cfg.APIKey == "" {
		return
	}
	got := strings.TrimPrefix(c.GetHeader("Authorization"), "Bearer ")
	if got == "" {
		got = c.GetHeader("x-api-key")
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

func (s *Server) cors(c *gin.Context) {
	origin := c.GetHeader("Origin")
	if origin == "" || len(s.cfg.CORSOrigins) == 0 {
		return
	}
	if !slices.Contains(s.cfg.CORSOrigins, "*") && !slices.Contains(s.cfg.CORSOrigins, origin) {
		if c.Request.Method == http.MethodOptions {
			c.AbortWithStatus(http.StatusForbidden)
		}
		return
	}
	h := c.Writer.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Vary", "Origin")
	if c.Request.Method == http.MethodOptions {
		h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key")
		h.Set("Access-Control-Max-Age", "600")
		c.AbortWithStatus(http.StatusNoContent)
	}
}

func (s *Server) count(c *gin.Context) {
	c.Next()
	endpoint := c.FullPath()
	if endpoint == "" {
		endpoint = "unknown"
	}
	s.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(c.Writer.Status())).Inc()
}

// health answers at once, whatever the model is doing.
func (s *Server) health(c *gin.Context) {
	status := "ok"
	if s.model.Load() == nil {
		status = "loading"
	}
	c.JSON(http.StatusOK, gin.H{"status": status})
}

// status is what the menu-bar app reads: the startup phase (from Config.Status) plus the served
// model, the last decode speed and the queue depth.
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
	out["model"], out["context_length"] = nil, 0
	if m := s.model.Load(); m != nil {
		out["model"], out["context_length"] = m.ID, m.Context
	}
	out["decode_tokens_per_s"] = s.metrics.lastDecodeTokS()
	out["queue_depth"] = s.sched.depth()
	c.JSON(http.StatusOK, out)
}

// retry restarts a failed startup; the client follows progress on /status.
func (s *Server) retry(c *gin.Context) {
	if s.cfg.Retry == nil {
		abortWith(c, badRequest("this server has no startup to retry", ""))
		return
	}
	if err := s.cfg.Retry(); err != nil {
		abortWith(c, &apiError{Status: http.StatusConflict, Message: err.Error(), Type: "invalid_request_error"})
		return
	}
	c.JSON(http.StatusAccepted, gin.H{"status": "retrying"})
}

type modelCard struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Created       int64  `json:"created"`
	OwnedBy       string `json:"owned_by"`
	ContextLength int    `json:"context_length"`
	MaxModelLen   int    `json:"max_model_len"`
}

func (s *Server) card(m *Model) modelCard {
	return modelCard{ID: m.ID, Object: "model", Created: s.started.Unix(), OwnedBy: "lily", ContextLength: m.Context, MaxModelLen: m.Context}
}

func (s *Server) listModels(c *gin.Context) {
	m := s.ready(c)
	if m == nil {
		return
	}
	c.JSON(http.StatusOK, gin.H{"object": "list", "data": []modelCard{s.card(m)}})
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
	c.JSON(http.StatusOK, card)
}

// decodeBody reads a JSON request body into v with OpenAI-style errors.
func decodeBody(c *gin.Context, v any) error {
	dec := json.NewDecoder(c.Request.Body)
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return errTooLarge
		}
		return badRequest("invalid JSON body: "+err.Error(), "")
	}
	return nil
}
