package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// askTimeout bounds the question to the server: a local server answers /v1/models at once.
const askTimeout = 5 * time.Second

// Discover asks the server at u (see RootURL) which model it serves and with what context
// window. key, when set, is sent as a bearer token; the Target carries it on.
func Discover(ctx context.Context, u, key string) (Target, error) {
	root := RootURL(u)
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, root+"/v1/models", nil)
	if err != nil {
		return Target{}, fmt.Errorf("server URL %q: %w", u, err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Target{}, fmt.Errorf("no Lily server answers at %s (%v): start it with `lily serve` (or the menu-bar app), or pass --url", root, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Target{}, fmt.Errorf("reading %s/v1/models: %w", root, err)
	}
	if err := statusError(root, resp.StatusCode, body, key != ""); err != nil {
		return Target{}, err
	}
	return parseModels(root, body, key)
}

// statusError explains a refusal from the server; nil for a 200.
func statusError(root string, status int, body []byte, sentKey bool) error {
	switch {
	case status == http.StatusOK:
		return nil
	case (status == http.StatusUnauthorized || status == http.StatusForbidden) && sentKey:
		return fmt.Errorf("the server at %s refused the API key (--api-key, or $LILY_API_KEY)", root)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return fmt.Errorf("the server at %s needs an API key: pass --api-key or set LILY_API_KEY", root)
	case status == http.StatusServiceUnavailable:
		return fmt.Errorf("the server at %s is not ready yet (%s): try again once the model has loaded", root, errorMessage(body))
	}
	return fmt.Errorf("GET %s/v1/models: %s (%s)", root, http.StatusText(status), errorMessage(body))
}

// errorMessage is the message of an OpenAI-style error body, or the body itself.
func errorMessage(body []byte) string {
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func parseModels(root string, body []byte, key string) (Target, error) {
	var list struct {
		Data []struct {
			ID            string `json:"id"`
			ContextLength int    `json:"context_length"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return Target{}, fmt.Errorf("%s/v1/models: not a model list: %w", root, err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return Target{}, fmt.Errorf("the server at %s lists no model", root)
	}
	m := list.Data[0]
	return Target{URL: root, Model: m.ID, Context: m.ContextLength, Key: key}, nil
}
