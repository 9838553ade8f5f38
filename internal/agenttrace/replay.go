package agenttrace

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ReplayOptions shape each turn's request.
type ReplayOptions struct {
	MaxTokens   int      // completion tokens per turn
	Temperature *float64 // nil: the server's default
	Seed        *int64
	// LogitBias is sent with every request (e.g. to keep a random demo model from ending turns).
	LogitBias map[string]float64
}

// TurnResult is what one turn measured.
type TurnResult struct {
	Turn             int     `json:"turn"`
	PromptTokens     int     `json:"prompt_tokens"`
	CachedTokens     int     `json:"cached_tokens"`
	PrefilledTokens  int     `json:"prefilled_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	TTFTSeconds      float64 `json:"ttft_s"`
	DecodeTokS       float64 `json:"decode_tok_s"`
	Output           string  `json:"-"`             // the streamed deltas, for comparing replays
	OutputSHA256     string  `json:"output_sha256"` // of Output: runs on other backends or cache settings compare by it
}

// Replay sends every turn of t to the chat endpoint at base (http://host:port) as a streaming
// request and measures it: time to the first generated chunk, decode speed over the rest, and
// the usage the server reports (prompt and cached tokens).
func Replay(ctx context.Context, base string, t *Trace, o ReplayOptions) ([]TurnResult, error) {
	var out []TurnResult
	for i := range t.Turns {
		r, err := replayTurn(ctx, base, t, i, o)
		if err != nil {
			return out, fmt.Errorf("turn %d: %w", i+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func replayTurn(ctx context.Context, base string, t *Trace, i int, o ReplayOptions) (TurnResult, error) {
	res := TurnResult{Turn: i + 1}
	body := map[string]any{"model": "lily", "messages": t.Messages(i), "tools": t.Tools, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "max_tokens": o.MaxTokens}
	if o.Temperature != nil {
		body["temperature"] = *o.Temperature
	}
	if o.Seed != nil {
		body["seed"] = *o.Seed
	}
	if len(o.LogitBias) > 0 {
		body["logit_bias"] = o.LogitBias
	}
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(raw))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return res, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	var first, last time.Time
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta json.RawMessage `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				CompletionTokens    int `json:"completion_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return res, err
		}
		switch {
		case ch.Error != nil:
			return res, fmt.Errorf("stream error: %s", ch.Error)
		case ch.Usage != nil:
			u := ch.Usage
			res.PromptTokens, res.CompletionTokens, res.CachedTokens = u.PromptTokens, u.CompletionTokens, u.PromptTokensDetails.CachedTokens
		case len(ch.Choices) == 1 && !bytes.Contains(ch.Choices[0].Delta, []byte(`"role"`)):
			if first.IsZero() {
				first = time.Now()
			}
			last = time.Now()
			text.Write(ch.Choices[0].Delta)
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	res.PrefilledTokens = res.PromptTokens - res.CachedTokens
	res.Output = text.String()
	sum := sha256.Sum256([]byte(res.Output))
	res.OutputSHA256 = hex.EncodeToString(sum[:])
	if !first.IsZero() {
		res.TTFTSeconds = first.Sub(start).Seconds()
		if res.CompletionTokens > 1 && last.After(first) {
			res.DecodeTokS = float64(res.CompletionTokens-1) / last.Sub(first).Seconds()
		}
	}
	return res, nil
}
