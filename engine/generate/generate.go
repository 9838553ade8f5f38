// Package generate runs token generation loops over any backend session.
package generate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Session is what a backend offers one sequence: feed tokens, get logits rows back.
type Session interface {
	Forward(tokens []int, all bool) ([][]float32, error)
}

// Result is the outcome of a generation.
type Result struct {
	Tokens       []int
	FinishReason string        // "length" or "stop"
	Prefill      time.Duration // prompt processing until the first token is chosen
	Decode       time.Duration // every later step
}

// Greedy generates up to maxTokens tokens by argmax, stopping after a token in stop.
// onLogits, when set, sees each row a token was chosen from (step 0 is the prompt's last row).
func Greedy(ctx context.Context, s Session, prompt []int, maxTokens int, stop []int, onLogits func(step int, row []float32) error) (Result, error) {
	var res Result
	if len(prompt) == 0 {
		return res, errors.New("generate: empty prompt")
	}
	if maxTokens < 1 {
		return res, fmt.Errorf("generate: max tokens must be at least 1, got %d", maxTokens)
	}
	start := time.Now()
	feed := prompt
	for step := range maxTokens {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		rows, err := s.Forward(feed, false)
		if err != nil {
			return res, err
		}
		row := rows[len(rows)-1]
		next := Argmax(row)
		if step == 0 {
			res.Prefill = time.Since(start)
			start = time.Now()
		}
		if onLogits != nil {
			if err := onLogits(step, row); err != nil {
				return res, err
			}
		}
		res.Tokens = append(res.Tokens, next)
		if slices.Contains(stop, next) {
			res.FinishReason = "stop"
			break
		}
		feed = []int{next}
	}
	if res.FinishReason == "" {
		res.FinishReason = "length"
	}
	if len(res.Tokens) > 1 {
		res.Decode = time.Since(start)
	}
	return res, nil
}

// Argmax returns the index of the largest value; ties go to the lowest index, NaN never wins.
func Argmax(x []float32) int {
	best := -1
	for i, v := range x {
		if v == v && (best < 0 || v > x[best]) {
			best = i
		}
	}
	return max(best, 0)
}
