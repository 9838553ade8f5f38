package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/internal/agenttrace"
	"github.com/lilyformac/lily/server"
)

// traceOutput is `lily bench --agent-trace --output json`.
type traceOutput struct {
	Trace   string                  `json:"trace"`
	Backend string                  `json:"backend"`
	CacheMB int                     `json:"cache_mb"`
	Turns   []agenttrace.TurnResult `json:"turns"`
	Totals  map[string]float64      `json:"totals"` // over every agent's turns; wall_s: the whole replay
	// Agents is every agent's turns when --agents runs several copies at once (agent 0's are
	// Turns too).
	Agents [][]agenttrace.TurnResult `json:"agents,omitempty"`
}

// agentStagger is how much later each further --agents copy of the trace starts.
const agentStagger = 250 * time.Millisecond

// runBenchTrace serves the model as lily serve does (same handlers, template, tokenizer, prefix
// cache and checkpoints) on a loopback port and replays the trace against it, one streaming
// request per turn, greedy.
func runBenchTrace(cmd *cobra.Command, o benchOptions) error {
	if o.traceTokens < 1 || o.cacheMB < 0 {
		return fmt.Errorf("--max-tokens %d and --cache-mb %d: expected at least 1 and 0", o.traceTokens, o.cacheMB)
	}
	tr, err := agenttrace.Load(o.trace)
	if err != nil {
		return err
	}
	if o.agents < 1 || o.agents > maxParallel {
		return fmt.Errorf("--agents %d: expected 1 to %d copies of the trace at once", o.agents, maxParallel)
	}
	start := time.Now()
	agents, err := replayServed(cmd.Context(), serveOptions{model: o.model, backend: o.backend, cacheMB: o.cacheMB, kvBits: o.kvBits, prefillChunk: o.prefillChunk, parallel: o.agents}, tr,
		agenttrace.ReplayOptions{MaxTokens: o.traceTokens, Temperature: new(float64)}, o.agents)
	if err != nil {
		return err
	}
	results := agents[0]
	out := traceOutput{Trace: o.trace, Backend: o.backend, CacheMB: o.cacheMB, Turns: results, Totals: map[string]float64{"wall_s": time.Since(start).Seconds()}}
	if o.agents > 1 {
		out.Agents = agents
	}
	for _, turns := range agents {
		for _, r := range turns {
			out.Totals["prompt_tokens"] += float64(r.PromptTokens)
			out.Totals["prefilled_tokens"] += float64(r.PrefilledTokens)
			out.Totals["cached_tokens"] += float64(r.CachedTokens)
			out.Totals["ttft_s"] += r.TTFTSeconds
		}
	}
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%s on %s, prefix cache %d MiB\nturn  prompt  prefilled  cached   ttft_s  decode_tok/s  output\n", o.trace, o.backend, o.cacheMB)
	for _, r := range results {
		fmt.Fprintf(w, "%4d  %6d  %9d  %6d  %7.3f  %12.1f  %.12s\n", r.Turn, r.PromptTokens, r.PrefilledTokens, r.CachedTokens, r.TTFTSeconds, r.DecodeTokS, r.OutputSHA256)
	}
	_, err = fmt.Fprintf(w, "total %6.0f  %9.0f  %6.0f  %7.3f\n", out.Totals["prompt_tokens"], out.Totals["prefilled_tokens"], out.Totals["cached_tokens"], out.Totals["ttft_s"])
	return err
}

// replayServed loads the model as lily serve does, serves it on 127.0.0.1 and replays tr: agents
// copies at once, each agentStagger after the one before.
func replayServed(ctx context.Context, o serveOptions, tr *agenttrace.Trace, ro agenttrace.ReplayOptions, agents int) ([][]agenttrace.TurnResult, error) {
	m, closeModel, err := loadServedModel(o)
	if err != nil {
		return nil, err
	}
	defer closeModel()
	// serve's warm step: first-use costs stay out of turn 1.
	if _, err := m.Runner.Generate(ctx, runner.Request{Prompt: []int{0}, MaxTokens: 1, NoCache: true}, func(runner.Token) (bool, error) { return true, nil }); err != nil {
		return nil, err
	}
	srv := server.New(server.Config{QueueLimit: agents})
	srv.SetModel(m)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := srv.HTTPServer()
	go hs.Serve(ln)
	defer hs.Close()
	out, errs := make([][]agenttrace.TurnResult, agents), make([]error, agents)
	var wg sync.WaitGroup
	for i := range agents {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * agentStagger)
			out[i], errs[i] = agenttrace.Replay(ctx, "http://"+ln.Addr().String(), tr, ro)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("agent %d: %w", i, err)
		}
	}
	return out, nil
}
