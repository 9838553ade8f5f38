package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// apiError is an OpenAI-style error: HTTP status plus the `error` object clients parse.
type apiError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
	// RetryAfter, when set, is sent as the Retry-After header (whole seconds, at least 1).
	RetryAfter time.Duration `json:"-"`
	// tokens and limit are a prompt's length and the most that fits, for context errors.
	tokens, limit int
}

func (e *apiError) Error() string { return e.Message }

func strp(s string) *string { return &s }

func badRequest(msg, param string) *apiError {
	e := &apiError{Status: http.StatusBadRequest, Message: msg, Type: "invalid_request_error"}
	if param != "" {
		e.Param = strp(param)
	}
	return e
}

// contextExceeded is a prompt of tokens that does not fit: at most limit do.
func contextExceeded(msg string, tokens, limit int) *apiError {
	e := badRequest(msg, "messages")
	e.Code = strp("context_length_exceeded")
	e.tokens, e.limit = tokens, limit
	return e
}

var (
	errUnauthorized = &apiError{Status: http.StatusUnauthorized, Message: "invalid or missing API key (send Authorization: Bearer <key>)", Type: "invalid_request_error", Code: strp("invalid_api_key")}
	errQueueFull    = &apiError{Status: http.StatusTooManyRequests, Message: "the server is busy: the request queue is full, retry later", Type: "rate_limit_error", Code: strp("queue_full")}
	errNotReady     = &apiError{Status: http.StatusServiceUnavailable, Message: "the model is not ready yet", Type: "server_error", Code: strp("model_not_ready"), RetryAfter: 5 * time.Second}
	errTimeout      = &apiError{Status: http.StatusServiceUnavailable, Message: "the request timed out", Type: "server_error", Code: strp("timeout")}
	errTooLarge     = &apiError{Status: http.StatusRequestEntityTooLarge, Message: "request body too large", Type: "invalid_request_error", Code: strp("request_too_large")}
	errBodyTimeout  = &apiError{Status: http.StatusRequestTimeout, Message: "the request body did not arrive in time (see lily serve --stall-timeout)", Type: "invalid_request_error", Code: strp("body_timeout")}
	errShuttingDown = &apiError{Status: http.StatusServiceUnavailable, Message: "the server is shutting down", Type: "server_error", Code: strp("shutting_down")}
)

// abortWith writes err as an error response in the dialect of the request's endpoint: OpenAI's
// shape, Anthropic's under /v1/messages, or Ollama's ({"error": "message"}) under /api/.
func abortWith(c *gin.Context, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"}
	}
	setRetryAfter(c, ae)
	c.Abort()
	reply(c, ae.Status, errorBody(c, ae))
}

// errorBody is ae in the shape of the request's dialect.
func errorBody(c *gin.Context, ae *apiError) any {
	switch path := c.Request.URL.Path; {
	case strings.HasPrefix(path, "/v1/messages"):
		return anthError(ae)
	case strings.HasPrefix(path, "/api/"):
		return gin.H{"error": ae.Message}
	}
	return gin.H{"error": ae}
}

// reply writes v as a JSON response. It encodes v before it writes anything, so a response is
// always a JSON answer or a JSON error: a value that cannot be encoded (a NaN, say) becomes a 500
// saying so, never a status with an empty body.
func reply(c *gin.Context, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		ae := &apiError{Status: http.StatusInternalServerError, Message: "the response could not be encoded: " + err.Error(), Type: "server_error"}
		status, b = ae.Status, must(json.Marshal(errorBody(c, ae)))
	}
	c.Data(status, "application/json; charset=utf-8", b)
}

// must is for encodings that cannot fail (strings and ints only).
func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// anthError is err in Anthropic's shape: {"type": "error", "error": {"type", "message"}}, the
// type named by the status as Anthropic names them. A prompt over the context says so in
// the words Claude Code looks for before it compacts the conversation.
func anthError(err error) gin.H {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Message: err.Error()}
	}
	kind := map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
		408: "timeout_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}[ae.Status]
	if kind == "" {
		kind = "api_error"
	}
	msg := ae.Message
	if ae.Code != nil && *ae.Code == "context_length_exceeded" && ae.limit > 0 {
		msg = fmt.Sprintf("prompt is too long: %d tokens > %d maximum", ae.tokens, ae.limit)
	}
	return gin.H{"type": "error", "error": gin.H{"type": kind, "message": msg}}
}

func setRetryAfter(c *gin.Context, e *apiError) {
	if e.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(int(max(1, math.Ceil(e.RetryAfter.Seconds())))))
	}
}
