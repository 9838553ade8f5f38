package draft

import "sync"

// Match-length buckets: 2, 3–4, 5–8, 9–16, 17 and more tokens. A longer match is stronger
// evidence that the text repeats, so each bucket learns its own acceptance.
const lengthBuckets = 5

func lengthBucket(n int) int {
	switch {
	case n <= 2:
		return 0
	case n <= 4:
		return 1
	case n <= 8:
		return 2
	case n <= 16:
		return 3
	}
	return 4
}

// priorAccept is the per-token acceptance each length bucket starts from: below what pays for a
// drafted token on this model at any context (a 2-row step costs 1.2 to 1.3 of a 1-row one, so
// one token needs about 0.26 to 0.34 with the gate's margin), so cold, a cost gate drafts
// nothing. Evidence comes from the proposals the gate did not verify, judged against what the
// sequence then generated (Shadow), so no blind draft is ever paid for.
var priorAccept = [lengthBuckets]float64{0.05, 0.08, 0.12, 0.16, 0.20}

const (
	priorWeight = 4    // the prior counts as this many verified tokens of the bucket
	slotWeight  = 4    // a draft position's own count shrinks toward its bucket's by this many
	horizon     = 1024 // a bucket's counts halve beyond this many verified tokens, to follow the traffic
	slots       = 16   // draft positions learnt apart; later ones share the last
)

// estimator learns, per bucket and draft position i, the probability that token i is accepted
// given that those before it were. Feedback of a accepted out of k proposed verified positions
// 0..min(a, k-1) and accepted 0..a-1. A position's estimate leans on its bucket's pooled rate
// until it has its own evidence, and the pooled rate on the prior, so a gate drafting one token
// (evidence for position 0 only) still learns whether longer drafts could pay.
type estimator struct {
	mu            sync.Mutex
	tried, kept   [][slots]float64 // per bucket and position
	triedB, keptB []float64        // per bucket, all positions
}

func newEstimator(buckets int) *estimator {
	return &estimator{
		tried: make([][slots]float64, buckets), kept: make([][slots]float64, buckets),
		triedB: make([]float64, buckets), keptB: make([]float64, buckets),
	}
}

// fill returns the estimates for a draft of k tokens in bucket b.
func (e *estimator) fill(b, k int) []float64 {
	out := make([]float64, k)
	e.mu.Lock()
	defer e.mu.Unlock()
	m := priorAccept[b%lengthBuckets]
	rate := (e.keptB[b] + priorWeight*m) / (e.triedB[b] + priorWeight)
	for i := range out {
		s := min(i, slots-1)
		out[i] = (e.kept[b][s] + slotWeight*rate) / (e.tried[b][s] + slotWeight)
	}
	return out
}

// learn records that accepted of k proposed tokens in bucket b were kept.
func (e *estimator) learn(b, k, accepted int) {
	if b < 0 || b >= len(e.triedB) || k <= 0 {
		return
	}
	accepted = max(0, min(accepted, k))
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := 0; i < k && i <= accepted; i++ {
		s := min(i, slots-1)
		e.tried[b][s]++
		e.triedB[b]++
		if i < accepted {
			e.kept[b][s]++
			e.keptB[b]++
		}
	}
	if e.triedB[b] > horizon {
		for s := range slots {
			e.tried[b][s] /= 2
			e.kept[b][s] /= 2
		}
		e.triedB[b] /= 2
		e.keptB[b] /= 2
	}
}
