// Package sample chooses the next token from logits: greedy or seeded sampling with temperature,
// top-k, top-p, min-p, presence/frequency/repetition penalties and logit bias, plus logprobs.
//
// The procedure is deliberately simple and fully specified so the GPU sampler can reproduce it
// bit for bit: (1) logit bias, (2) repetition penalty, (3) frequency and presence penalties,
// (4) log-softmax of that (reported logprobs), (5) temperature, (6) top-k, (7) top-p, (8) min-p,
// (9) inverse-CDF draw over the survivors sorted by probability (ties: lower id first) with
// u = splitmix64(seed + step·φ) / 2^64.
package sample

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// Params configure a sampler. Zero values mean "off" except RepetitionPenalty (1 = off) and
// TopP (0 or 1 = off).
type Params struct {
	Temperature       float32 // 0 selects greedy decoding
	TopK              int
	TopP              float32
	MinP              float32
	PresencePenalty   float32
	FrequencyPenalty  float32
	RepetitionPenalty float32
	LogitBias         map[int]float32
	Seed              *uint64
	VocabLimit        int  // ids ≥ VocabLimit are padding rows and are never chosen (0 = no limit)
	Logprobs          bool // report the chosen token's logprob
	TopLogprobs       int  // alternatives to report per step (0..20); implies Logprobs
}

// Validate reports parameter values no sampler accepts.
func (p Params) Validate() error {
	switch {
	case p.Temperature < 0 || p.Temperature > 2 || isNaN(p.Temperature):
		return fmt.Errorf("temperature must be between 0 and 2, got %g", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("top_k must be ≥ 0, got %d", p.TopK)
	case p.TopP < 0 || p.TopP > 1 || isNaN(p.TopP):
		return fmt.Errorf("top_p must be between 0 and 1, got %g", p.TopP)
	case p.MinP < 0 || p.MinP > 1 || isNaN(p.MinP):
		return fmt.Errorf("min_p must be between 0 and 1, got %g", p.MinP)
	case p.PresencePenalty < -2 || p.PresencePenalty > 2 || isNaN(p.PresencePenalty):
		return fmt.Errorf("presence_penalty must be between -2 and 2, got %g", p.PresencePenalty)
	case p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2 || isNaN(p.FrequencyPenalty):
		return fmt.Errorf("frequency_penalty must be between -2 and 2, got %g", p.FrequencyPenalty)
	case p.RepetitionPenalty < 0 || p.RepetitionPenalty > 10 || isNaN(p.RepetitionPenalty):
		return fmt.Errorf("repetition_penalty must be between 0 and 10 (1 = off), got %g", p.RepetitionPenalty)
	case p.TopLogprobs < 0 || p.TopLogprobs > 20:
		return fmt.Errorf("top_logprobs must be between 0 and 20, got %d", p.TopLogprobs)
	}
	for id, b := range p.LogitBias {
		if id < 0 || (p.VocabLimit > 0 && id >= p.VocabLimit) {
			return fmt.Errorf("logit_bias: token id %d outside the vocabulary", id)
		}
		if b < -100 || b > 100 || isNaN(b) {
			return fmt.Errorf("logit_bias: value for token %d must be between -100 and 100, got %g", id, b)
		}
	}
	return nil
}

func isNaN(f float32) bool { return f != f }

// Candidate is a token with its log-probability.
type Candidate struct {
	ID      int
	Logprob float32
}

// Choice is one sampling step's outcome.
type Choice struct {
	ID      int
	Logprob float32     // log-probability of ID under the penalised distribution (step 4), when asked
	Top     []Candidate // the TopLogprobs most likely tokens, most likely first
}

// Sampler holds one sequence's sampling state.
type Sampler struct {
	p      Params
	seed   uint64
	step   uint64
	counts map[int]int  // generated tokens, for presence/frequency penalties
	seen   map[int]bool // prompt and generated tokens, for the repetition penalty
	work   []float32
	masked []float32 // NextAllowed's copy of the logits
	order  []int
	cands  []candidate
}

// New returns a sampler for a sequence whose prompt is prompt.
func New(p Params, prompt []int) *Sampler {
	s := &Sampler{p: p, counts: map[int]int{}, seen: map[int]bool{}}
	if p.Seed != nil {
		s.seed = *p.Seed
	} else {
		var b [8]byte
		rand.Read(b[:])
		s.seed = binary.LittleEndian.Uint64(b[:])
	}
	if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 {
		for _, id := range prompt {
			s.seen[id] = true
		}
	}
	return s
}

// Greedy reports whether the sampler always takes the most likely token.
func (s *Sampler) Greedy() bool { return s.p.Temperature == 0 }

// Next chooses a token from logits (which it does not modify) and records it.
func (s *Sampler) Next(logits []float32) Choice {
	n := len(logits)
	if s.p.VocabLimit > 0 {
		n = min(n, s.p.VocabLimit)
	}
	x := logits[:n]
	rp := s.p.RepetitionPenalty
	if len(s.p.LogitBias) > 0 || (rp != 0 && rp != 1) || len(s.counts) > 0 {
		x = append(s.work[:0], x...) // adjusted copy; the caller's logits stay intact
		s.work = x
		for id, b := range s.p.LogitBias {
			if id < n {
				x[id] += b
			}
		}
		if rp != 0 && rp != 1 {
			for id := range s.seen {
				if id < n {
					if x[id] > 0 {
						x[id] /= rp
					} else {
						x[id] *= rp
					}
				}
			}
		}
		for id, c := range s.counts {
			if id < n {
				// float32(...) rounds the product: Go may fuse a*b+c on arm64 but not on amd64,
				// and the GPU sampler reproduces this rounding.
				x[id] -= float32(s.p.FrequencyPenalty*float32(c)) + s.p.PresencePenalty
			}
		}
	}
	choice := Choice{}
	if s.Greedy() {
		choice.ID = argmax(x)
	} else {
		choice.ID = s.draw(x)
	}
	if s.p.Logprobs || s.p.TopLogprobs > 0 {
		logZ := logSumExp(x)
		choice.Logprob = x[choice.ID] - logZ
		if s.p.TopLogprobs > 0 {
			choice.Top = topCandidates(x, s.p.TopLogprobs, logZ)
		}
	}
	s.accept(choice.ID)
	return choice
}

// NextAllowed is Next over the tokens in allowed only, a bitset over ids (bit id%64 of word
// id/64; nil: every token); allowed must hold at least one id below the vocabulary limit.
func (s *Sampler) NextAllowed(logits []float32, allowed []uint64) Choice {
	if allowed == nil {
		return s.Next(logits)
	}
	masked := append(s.masked[:0], logits...)
	s.masked = masked
	ninf := float32(math.Inf(-1))
	for id := range masked {
		if w := id >> 6; w >= len(allowed) || allowed[w]&(1<<(id&63)) == 0 {
			masked[id] = ninf
		}
	}
	return s.Next(masked)
}

// Forced records a token the caller chose instead of the sampler (a forced one), as if drawn:
// penalties count it and the random stream moves on.
func (s *Sampler) Forced(id int) Choice {
	s.accept(id)
	return Choice{ID: id}
}

func (s *Sampler) accept(id int) {
	s.step++
	if s.p.FrequencyPenalty != 0 || s.p.PresencePenalty != 0 {
		s.counts[id]++
	}
	if s.p.RepetitionPenalty != 0 && s.p.RepetitionPenalty != 1 {
		s.seen[id] = true
	}
}

// draw applies temperature and the truncations, then an inverse-CDF draw. x is read only.
func (s *Sampler) draw(x []float32) int {
	t := s.p.Temperature
	// Top-k first, by logit (exp is monotonic): with the usual k = 20 this keeps the work per
	// step linear in the vocabulary instead of sorting all of it.
	order := s.order[:0]
	if k := s.p.TopK; k > 0 && k < len(x) {
		order = topIndices(x, k, order)
	} else {
		for i := range x {
			if !math.IsInf(float64(x[i]), -1) {
				order = append(order, i)
			}
		}
	}
	s.order = order
	m := float32(math.Inf(-1))
	for _, i := range order {
		m = max(m, x[i])
	}
	cands := s.cands[:0]
	for _, i := range order {
		cands = append(cands, candidate{i, float32(math.Exp(float64((x[i] - m) / t)))}) // relative to the best
	}
	s.cands = cands
	slices.SortFunc(cands, func(a, b candidate) int {
		if a.p != b.p {
			if a.p > b.p {
				return -1
			}
			return 1
		}
		return a.id - b.id
	})
	var total float64
	for _, c := range cands {
		total += float64(c.p)
	}
	if p := s.p.TopP; p > 0 && p < 1 {
		var cum float64
		for j, c := range cands {
			cum += float64(c.p)
			if cum >= float64(p)*total {
				cands = cands[:j+1]
				break
			}
		}
	}
	if mp := s.p.MinP; mp > 0 {
		limit := mp * cands[0].p // cands[0] is the most likely: keep p ≥ min_p · p_max
		j := len(cands)
		for j > 1 && cands[j-1].p < limit {
			j--
		}
		cands = cands[:j]
	}
	total = 0
	for _, c := range cands {
		total += float64(c.p)
	}
	u := s.uniform() * total
	var cum float64
	for _, c := range cands {
		cum += float64(c.p)
		if u < cum {
			return c.id
		}
	}
	return cands[len(cands)-1].id
}

type candidate struct {
	id int
	p  float32
}

// topIndices returns the indices of the k largest values of x (ties: lower index), unordered,
// using a size-k min-heap whose root is the weakest kept candidate.
func topIndices(x []float32, k int, heap []int) []int {
	weaker := func(a, b int) bool { return x[a] < x[b] || (x[a] == x[b] && a > b) }
	down := func(i int) {
		for {
			l, small := 2*i+1, i
			if l < len(heap) && weaker(heap[l], heap[small]) {
				small = l
			}
			if r := l + 1; r < len(heap) && weaker(heap[r], heap[small]) {
				small = r
			}
			if small == i {
				return
			}
			heap[i], heap[small] = heap[small], heap[i]
			i = small
		}
	}
	for i := range x {
		if len(heap) < k {
			heap = append(heap, i)
			for j := len(heap) - 1; j > 0 && weaker(heap[j], heap[(j-1)/2]); j = (j - 1) / 2 {
				heap[j], heap[(j-1)/2] = heap[(j-1)/2], heap[j]
			}
		} else if weaker(heap[0], i) {
			heap[0] = i
			down(0)
		}
	}
	return heap
}

// uniform is the step's random number in [0, 1), a pure function of (seed, step).
func (s *Sampler) uniform() float64 {
	z := s.seed + s.step*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] || (x[best] != x[best] && v == v) {
			best = i
		}
	}
	return best
}

func logSumExp(x []float32) float32 {
	m := x[argmax(x)]
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v - m))
	}
	return m + float32(math.Log(sum))
}

// topCandidates is the k most likely tokens; a token of probability zero (masked to -Inf by a
// grammar) is no alternative, so fewer than k may come back.
func topCandidates(x []float32, k int, logZ float32) []Candidate {
	k = min(k, len(x))
	top := make([]Candidate, 0, k+1)
	for i, v := range x {
		if math.IsInf(float64(v), -1) || len(top) == k && v <= top[k-1].Logprob {
			continue
		}
		c := Candidate{ID: i, Logprob: v}
		j := len(top)
		top = append(top, c)
		for j > 0 && top[j-1].Logprob < v {
			top[j] = top[j-1]
			j--
		}
		top[j] = c
		if len(top) > k {
			top = top[:k]
		}
	}
	for i := range top {
		top[i].Logprob -= logZ
	}
	return top
}
