package server

import (
	"errors"
	"math"
	"net/http"
	"strconv"
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

func contextExceeded(msg string) *apiError {
	e := badRequest(msg, "messages")
	e.Code = strp("context_length_exceeded")
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

// abortWith writes err as an OpenAI error response.
func abortWith(c *gin.Context, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"}
	}
	setRetryAfter(c, ae)
	c.AbortWithStatusJSON(ae.Status, gin.H{"error": ae})
}

func setRetryAfter(c *gin.Context, e *apiError) {
	if e.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(int(max(1, math.Ceil(e.RetryAfter.Seconds())))))
	}
}
