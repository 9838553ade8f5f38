package server

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"
)

// apiError is an OpenAI-style error: HTTP status plus the `error` object clients parse.
type apiError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
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
	errNotReady     = &apiError{Status: http.StatusServiceUnavailable, Message: "the model is not ready yet", Type: "server_error", Code: strp("model_not_ready")}
	errTimeout      = &apiError{Status: http.StatusServiceUnavailable, Message: "the request timed out", Type: "server_error", Code: strp("timeout")}
	errTooLarge     = &apiError{Status: http.StatusRequestEntityTooLarge, Message: "request body too large", Type: "invalid_request_error", Code: strp("request_too_large")}
)

// abortWith writes err as an OpenAI error response.
func abortWith(c *gin.Context, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"}
	}
	c.AbortWithStatusJSON(ae.Status, gin.H{"error": ae})
}
