package server

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lilyformac/lily/engine/runner"
)

// draftStats are the engine loop's drafting counters (zero without a model, or with drafting off).
func (s *Server) draftStats() runner.DraftStats {
	if m := s.model.Load(); m != nil && m.Runner != nil {
		return m.Runner.DraftStats()
	}
	return runner.DraftStats{}
}

// draftCollector exposes the drafting counters: tokens drafted and accepted and the steps that
// verified drafts, per drafter, the steps by drafts verified, and the modeled speed-up realised.
type draftCollector struct {
	s                                  *Server
	drafted, accepted, steps, k, speed *prometheus.Desc
}

func newDraftCollector(s *Server) *draftCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &draftCollector{s: s,
		drafted:  d("lily_draft_tokens_total", "Tokens drafted and verified (speculative decoding).", "drafter"),
		accepted: d("lily_draft_accepted_tokens_total", "Drafted tokens kept: equal to what plain decoding chose.", "drafter"),
		steps:    d("lily_draft_steps_total", "Sequence steps that verified drafts.", "drafter"),
		k:        d("lily_draft_steps_by_k_total", "Sequence steps by the drafted tokens they verified (k).", "k"),
		speed:    d("lily_draft_modeled_speedup", "Tokens per modeled step cost of the steps with drafts, over plain decoding's for the same tokens (1: no gain; the cost gate's model of the backend's step)."),
	}
}

func (c *draftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.drafted, c.accepted, c.steps, c.k, c.speed} {
		ch <- d
	}
}

func (c *draftCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.draftStats()
	if st.Drafter == "" {
		return // drafting off
	}
	counter := func(d *prometheus.Desc, v int64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
	}
	counter(c.drafted, st.Drafted, st.Drafter)
	counter(c.accepted, st.Accepted, st.Drafter)
	counter(c.steps, st.Steps, st.Drafter)
	for k := 1; k < len(st.K); k++ {
		counter(c.k, st.K[k], strconv.Itoa(k))
	}
	ch <- prometheus.MustNewConstMetric(c.speed, prometheus.GaugeValue, modeledSpeedup(st))
}

// modeledSpeedup is PlainCost / Cost, 1 before any step drafted.
func modeledSpeedup(st runner.DraftStats) float64 {
	if st.Cost <= 0 {
		return 1
	}
	return st.PlainCost / st.Cost
}

// draftStatus is /status's drafts object (nil with drafting off).
func (s *Server) draftStatus() any {
	st := s.draftStats()
	if st.Drafter == "" {
		return nil
	}
	return map[string]any{"drafter": st.Drafter, "mode": st.Mode, "rows": st.Rows, "priced": st.Priced, "steps": st.Steps, "drafted": st.Drafted, "accepted": st.Accepted,
		"tokens": st.Tokens, "k_steps": st.K[1:], "modeled_speedup": modeledSpeedup(st)}
}
