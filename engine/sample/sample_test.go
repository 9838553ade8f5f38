package sample

import (
	"math"
	"slices"
	"testing"
)

func seed(v uint64) *uint64 { return &v }

func logits(vals ...float32) []float32 { return vals }

func TestGreedyAndVocabLimit(t *testing.T) {
	x := logits(0.1, 3, 2, 9) // id 3 is a padding row
	s := New(Params{VocabLimit: 3}, nil)
	for range 5 {
		if c := s.Next(x); c.ID != 1 {
			t.Fatalf("greedy chose %d, want 1 (id 3 is past the vocabulary limit)", c.ID)
		}
	}
	s = New(Params{Temperature: 1, Seed: seed(1), VocabLimit: 3}, nil)
	for range 200 {
		if c := s.Next(x); c.ID == 3 {
			t.Fatal("sampled a padding id")
		}
	}
}

func TestSeededDeterminism(t *testing.T) {
	x := make([]float32, 50)
	for i := range x {
		x[i] = float32(math.Sin(float64(i))) * 2
	}
	run := func(sd uint64) []int {
		s := New(Params{Temperature: 1, TopP: 0.95, TopK: 20, Seed: seed(sd)}, nil)
		var ids []int
		for range 64 {
			ids = append(ids, s.Next(x).ID)
		}
		return ids
	}
	a, b, c := run(7), run(7), run(8)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed diverged at step %d", i)
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatal("different seeds gave identical sequences")
	}
}

// TestDistribution draws many tokens at T=1 and compares frequencies with softmax.
func TestDistribution(t *testing.T) {
	x := logits(0, 1, 2, -1, 0.5)
	var z float64
	for _, v := range x {
		z += math.Exp(float64(v))
	}
	s := New(Params{Temperature: 1, Seed: seed(42)}, nil)
	const n = 40000
	counts := make([]int, len(x))
	for range n {
		counts[s.Next(x).ID]++
	}
	for i, v := range x {
		p := math.Exp(float64(v)) / z
		got := float64(counts[i]) / n
		if sd := math.Sqrt(p * (1 - p) / n); math.Abs(got-p) > 5*sd {
			t.Errorf("token %d: frequency %.4f, softmax %.4f (±%.4f)", i, got, p, sd)
		}
	}
}

func TestTemperatureSharpens(t *testing.T) {
	x := logits(0, 1, 2)
	count := func(temp float32) int {
		s := New(Params{Temperature: temp, Seed: seed(3)}, nil)
		best := 0
		for range 4000 {
			if s.Next(x).ID == 2 {
				best++
			}
		}
		return best
	}
	if lo, hi := count(0.3), count(1.5); lo <= hi {
		t.Fatalf("low temperature picked the best token %d times, high %d", lo, hi)
	}
}

func TestTruncations(t *testing.T) {
	x := logits(1, 2, 3, 2.9, 0)
	cases := []struct {
		name  string
		p     Params
		allow map[int]bool
	}{
		{"top_k 1", Params{Temperature: 1, TopK: 1}, map[int]bool{2: true}},
		{"top_k 2", Params{Temperature: 1, TopK: 2}, map[int]bool{2: true, 3: true}},
		{"top_p tiny", Params{Temperature: 1, TopP: 0.01}, map[int]bool{2: true}},
		{"min_p 0.9", Params{Temperature: 1, MinP: 0.9}, map[int]bool{2: true, 3: true}},
		{"min_p 1", Params{Temperature: 1, MinP: 1}, map[int]bool{2: true}},
	}
	for _, c := range cases {
		c.p.Seed = seed(9)
		s := New(c.p, nil)
		seen := map[int]bool{}
		for range 500 {
			id := s.Next(x).ID
			if !c.allow[id] {
				t.Fatalf("%s: sampled %d", c.name, id)
			}
			seen[id] = true
		}
		if len(seen) != len(c.allow) {
			t.Errorf("%s: saw %v, want all of %v", c.name, seen, c.allow)
		}
	}
}

func TestPenaltiesAndBias(t *testing.T) {
	x := logits(1, 1.5, 0.2)
	// Frequency penalty: after generating 1 twice its logit drops by 2·1.0 → 0 wins next.
	s := New(Params{FrequencyPenalty: 1}, nil)
	if s.Next(x).ID != 1 || s.Next(x).ID != 0 {
		t.Fatal("frequency penalty did not move greedy choice away from the repeated token")
	}
	// Presence penalty is flat per seen token.
	s = New(Params{PresencePenalty: 0.6}, nil)
	if a, b := s.Next(x).ID, s.Next(x).ID; a != 1 || b != 0 {
		t.Fatalf("presence penalty: got %d then %d", a, b)
	}
	// Repetition penalty applies to prompt tokens too: 1.5/2 < 1 → 0 wins.
	s = New(Params{RepetitionPenalty: 2}, []int{1})
	if id := s.Next(x).ID; id != 0 {
		t.Fatalf("repetition penalty: got %d", id)
	}
	// A negative logit is multiplied, pushing it further down.
	s = New(Params{RepetitionPenalty: 2}, []int{0})
	if c := s.Next(logits(-1, -1.5)); c.ID != 1 {
		t.Fatalf("repetition penalty on negative logits: got %d", c.ID)
	}
	// Logit bias forces or bans.
	s = New(Params{LogitBias: map[int]float32{2: 100}}, nil)
	if s.Next(x).ID != 2 {
		t.Fatal("logit bias +100 did not force the token")
	}
	s = New(Params{Temperature: 1, Seed: seed(5), LogitBias: map[int]float32{1: -100}}, nil)
	for range 300 {
		if s.Next(x).ID == 1 {
			t.Fatal("logit bias -100 did not ban the token")
		}
	}
}

func TestLogprobs(t *testing.T) {
	x := logits(0, 2, 1, -3)
	s := New(Params{TopLogprobs: 3}, nil)
	c := s.Next(x)
	var z float64
	for _, v := range x {
		z += math.Exp(float64(v))
	}
	want := 2 - math.Log(z)
	if math.Abs(float64(c.Logprob)-want) > 1e-5 {
		t.Fatalf("chosen logprob %g, want %g", c.Logprob, want)
	}
	if len(c.Top) != 3 || c.Top[0].ID != 1 || c.Top[1].ID != 2 || c.Top[2].ID != 0 {
		t.Fatalf("top candidates %+v", c.Top)
	}
	if c.Top[0].Logprob != c.Logprob {
		t.Fatalf("top[0] %g != chosen %g", c.Top[0].Logprob, c.Logprob)
	}
}

// TestLogprobsMasked: a token a grammar masked out has probability zero: it is never an
// alternative (its logprob would be -Inf, which JSON cannot carry), and every reported value is finite.
func TestLogprobsMasked(t *testing.T) {
	x := logits(0, 2, 1, -3, 5)
	allowed := []uint64{1<<0 | 1<<3} // ids 0 and 3
	for _, temp := range []float32{0, 1} {
		s := New(Params{Temperature: temp, TopLogprobs: 4, Seed: seed(1)}, nil)
		c := s.NextAllowed(x, allowed)
		if c.ID != 0 && c.ID != 3 {
			t.Fatalf("T %g: chose %d outside the mask", temp, c.ID)
		}
		if len(c.Top) != 2 {
			t.Fatalf("T %g: %d alternatives %+v, want the 2 allowed ones", temp, len(c.Top), c.Top)
		}
		for _, a := range append(c.Top, Candidate{c.ID, c.Logprob}) {
			if math.IsInf(float64(a.Logprob), 0) || math.IsNaN(float64(a.Logprob)) {
				t.Fatalf("T %g: non-finite logprob %+v", temp, a)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []Params{
		{Temperature: -1}, {Temperature: 3}, {TopK: -2}, {TopP: 1.5}, {MinP: -0.1},
		{PresencePenalty: 3}, {FrequencyPenalty: -2.5}, {RepetitionPenalty: -1}, {TopLogprobs: 21},
		{LogitBias: map[int]float32{5: 101}}, {VocabLimit: 10, LogitBias: map[int]float32{10: 1}},
		{Temperature: float32(math.NaN())},
	}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if err := (Params{Temperature: 0.7, TopP: 0.8, TopK: 20, PresencePenalty: 1.5, RepetitionPenalty: 1}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestTopIndicesMatchesSort(t *testing.T) {
	x := make([]float32, 5000)
	for i := range x {
		x[i] = float32((i*7919)%1013) / 7 // many ties
	}
	for _, k := range []int{1, 2, 20, 999} {
		got := topIndices(x, k, nil)
		slices.SortFunc(got, func(a, b int) int {
			if x[a] != x[b] {
				if x[a] > x[b] {
					return -1
				}
				return 1
			}
			return a - b
		})
		all := make([]int, len(x))
		for i := range all {
			all[i] = i
		}
		slices.SortStableFunc(all, func(a, b int) int {
			if x[a] > x[b] {
				return -1
			} else if x[a] < x[b] {
				return 1
			}
			return 0
		})
		if !slices.Equal(got, all[:k]) {
			t.Fatalf("k=%d: got %v, want %v", k, got[:min(k, 10)], all[:min(k, 10)])
		}
	}
}

// BenchmarkSampleQwenDefaults: one sampling step over Qwen3.6's 248,320 logits with the
// recommended thinking-mode settings.
func BenchmarkSampleQwenDefaults(b *testing.B) {
	x := make([]float32, 248320)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.37)) * 8
	}
	s := New(Params{Temperature: 1, TopP: 0.95, TopK: 20, Seed: seed(1), VocabLimit: 248077}, nil)
	b.ResetTimer()
	for range b.N {
		s.Next(x)
	}
}

// TestNextAllowed: only tokens in the bitset are chosen, whatever their logits, greedy and
// sampled; Forced counts for the penalties like a drawn token.
func TestNextAllowed(t *testing.T) {
	x := make([]float32, 130)
	for i := range x {
		x[i] = float32(i % 7)
	}
	allowed := make([]uint64, 3)
	for _, id := range []int{3, 64, 129} { // logits 3, 1, 3: not the row's maximum (6)
		allowed[id/64] |= 1 << (id % 64)
	}
	greedy := New(Params{}, nil)
	if c := greedy.NextAllowed(x, allowed); c.ID != 3 && c.ID != 129 {
		t.Fatalf("greedy chose %d outside the allowed set's best", c.ID)
	}
	s := New(Params{Temperature: 1.5, Seed: seed(7), Logprobs: true}, nil)
	seen := map[int]bool{}
	for range 300 {
		c := s.NextAllowed(x, allowed)
		if c.ID != 3 && c.ID != 64 && c.ID != 129 || c.Logprob > 0 {
			t.Fatalf("chose %d (logprob %g)", c.ID, c.Logprob)
		}
		seen[c.ID] = true
	}
	if len(seen) != 3 {
		t.Fatalf("sampled %v of the three allowed ids", seen)
	}
	p := New(Params{PresencePenalty: 2}, nil)
	p.Forced(6) // id 6 has the top logit; penalised by 2 it falls below id 13's 6−0
	if c := p.Next(x[:14]); c.ID != 13 {
		t.Fatalf("after forcing 6, greedy chose %d: the forced token was not counted", c.ID)
	}
}
