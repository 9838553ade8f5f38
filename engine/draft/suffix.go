package draft

import "sync"

// SuffixOptions tunes the suffix drafter; a zero field takes its default.
type SuffixOptions struct {
	// Window is how many of its latest tokens a sequence's index keeps (default 262,144, the
	// model's context; at most 524,288, which at 20 bytes a token keeps a sequence's index
	// under 16 MB). Rounded up to a power of two.
	Window int
	// StoreTokens bounds the server-wide store of finished outputs (default 524,288: about
	// 10 MB); the oldest outputs leave first. Rounded up to a power of two.
	StoreTokens int
	// MinMatch is the shortest match that drafts, 2 to 8 (default 2).
	MinMatch int
}

const maxWindow = 1 << 19

// Suffix drafts by lookup, with no weights: the longest recent match of a sequence's last
// tokens, first in its own prompt and output, then in the outputs of sequences that have
// finished, proposes the tokens that followed it. Of equally long matches the most recent wins
// rather than the most frequent continuation: agents and editors repeat their latest version
// of a text (a file as last rewritten, a tool call as last made), and the newest occurrence is
// the first a hash chain yields, where counting continuations would cost a pass over them all.
// A draft is at most half the match long (one token for a match of 2 or 3): long drafts on
// weak evidence are how speculative decoding ends up slower than plain decoding. What the
// chain's other occurrences of the matched context went on with is the other evidence
// (agreement): where they disagree with the newest, the text is not being copied, and that
// class of proposal learns its own (low) acceptance.
type Suffix struct {
	opt   SuffixOptions
	mu    sync.RWMutex // guards store
	store *index
	est   *estimator
}

// Proposal buckets: a match's length bucket, plus lengthBuckets when it came from the store
// (another request's text earns its own acceptance), plus 2·lengthBuckets times its agreement
// class (agreeClass): 30 buckets, each learning its acceptance apart.
const (
	fromStore = lengthBuckets
	buckets   = 2 * lengthBuckets * agreeClasses
)

// Agreement classes: the matched context occurs once (as far as the chain's probes reach), or
// more often and every occurrence went on as the newest did, or more often with other
// continuations too. On the project's agent traces the second is kept far more often than the
// third (0.95 against 0.17 of the drafts after a 2-token match).
const (
	agreeOnce = iota
	agreeAll
	agreeSplit
	agreeClasses
)

// agreeClass is the class of a match whose context occurs seen times, same of them going on as
// the match does.
func agreeClass(seen, same int) int {
	switch {
	case seen <= 1:
		return agreeOnce
	case same == seen:
		return agreeAll
	}
	return agreeSplit
}

// NewSuffix returns a suffix drafter.
func NewSuffix(opt SuffixOptions) *Suffix {
	if opt.Window <= 0 {
		opt.Window = 1 << 18
	}
	opt.Window = min(opt.Window, maxWindow)
	if opt.StoreTokens <= 0 {
		opt.StoreTokens = 1 << 19
	}
	if opt.MinMatch <= 0 {
		opt.MinMatch = 2
	}
	opt.MinMatch = max(2, min(opt.MinMatch, longKey))
	return &Suffix{
		opt:   opt,
		store: newIndex(opt.StoreTokens, opt.MinMatch, opt.StoreTokens),
		est:   newEstimator(buckets),
	}
}

// Name implements Drafter.
func (d *Suffix) Name() string { return "suffix" }

// Start implements Drafter: it indexes the prompt (O(its length)), with hash buckets for twice
// the prompt and 8k tokens of output, beyond which chains lengthen.
func (d *Suffix) Start(prompt []int) Stream {
	n := len(prompt)
	s := &SuffixStream{d: d, x: newIndex(d.opt.Window, d.opt.MinMatch, 2*n+8192), expected: localDoubt}
	s.Commit(prompt)
	s.prompt = s.x.n
	return s
}

// StoreBytes is the memory the store of finished outputs holds.
func (d *Suffix) StoreBytes() int64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.store.bytes()
}

// SuffixStream is one sequence's stream. The engine loop calls its methods from one goroutine
// at a time; streams of one drafter run in parallel.
type SuffixStream struct {
	d      *Suffix
	x      *index // nil once closed
	prompt int64  // tokens of the prompt: the output follows
	// tried, kept and expected are the sequence's own verdicts on its drafts, over every bucket
	// and position: positions judged, those kept, and the drafter's estimates for them summed
	// (halved beyond localHorizon, to follow the text the sequence writes now).
	tried, kept, expected float64
}

// The stream's own evidence scales the drafter's estimates by how its drafts have done against
// them (kept over expected, each with localWeight added): a sequence writing new text drafts
// little even where other sequences' copies taught the drafter to expect much, and the buckets
// keep their order. A stream starts in doubt, as if localDoubt of its drafts that the drafter
// expected to be kept had been rejected, so it drafts only once its own proposals (judged in the
// shadow of plain decoding) have come true. The numbers, with priorWeight, were chosen on the
// project's two agent traces (lily bench --drafts): among weights 5 to 12, doubts 1 to 4 and
// prior weights 2 to 8, these gave the best mean per-turn speed-up with no turn below 1.0.
const (
	localWeight  = 8  // kept and expected verdicts the stream's ratio starts from
	localDoubt   = 3  // expected-to-be-kept drafts a stream starts having seen rejected
	localHorizon = 48 // the stream's counts halve beyond this many verdicts
)

// Bytes is the memory the stream's index holds (0 once closed).
func (s *SuffixStream) Bytes() int64 {
	if s.x == nil {
		return 0
	}
	return s.x.bytes()
}

// Commit implements Stream in O(len(tokens)).
func (s *SuffixStream) Commit(tokens []int) {
	if s.x == nil {
		return
	}
	for _, t := range tokens {
		s.x.add(int32(t))
	}
}

// Draft implements Stream.
func (s *SuffixStream) Draft(limit int) Proposal {
	if s.x == nil || limit <= 0 || s.x.n == 0 {
		return Proposal{}
	}
	q, qp, minLen := s.x, s.x.n-1, s.d.opt.MinMatch
	m := longest(q, qp, q, qp, minLen)
	var tokens []int
	bucket := lengthBucket(m.n)
	// The store is skipped while a Close is adding to it: a draft never waits for one.
	if m.n < maxMatch && s.d.mu.TryRLock() {
		if o := longest(q, qp, s.d.store, s.d.store.n-1, max(minLen, m.n+1)); o.pos >= 0 {
			m, bucket = o, fromStore+lengthBucket(o.n)
			tokens = s.d.store.follow(o.pos, min(limit, draftCap(o.n)))
			bucket += 2 * lengthBuckets * agreeClass(agreement(q, qp, s.d.store, s.d.store.n-1, o))
		}
		s.d.mu.RUnlock()
	}
	if m.pos < 0 {
		return Proposal{}
	}
	if tokens == nil {
		tokens = q.follow(m.pos, min(limit, draftCap(m.n)))
		bucket += 2 * lengthBuckets * agreeClass(agreement(q, qp, q, qp, m))
	}
	accept := s.d.est.fill(bucket, len(tokens))
	r := (s.kept + localWeight) / (s.expected + localWeight)
	for i, g := range accept {
		accept[i] = min(1, g*r)
	}
	return Proposal{Tokens: tokens, Accept: accept, Bucket: bucket}
}

// draftCap is the longest draft a match of n tokens earns.
func draftCap(n int) int { return max(1, n/2) }

// Feedback implements Stream: the bucket's estimates and the stream's own learn from the
// verified positions.
func (s *SuffixStream) Feedback(p Proposal, accepted int) {
	k := len(p.Tokens)
	accepted = max(0, min(accepted, k))
	judged := min(accepted+1, k)
	for _, g := range s.d.est.fill(p.Bucket, judged) {
		s.expected += g
	}
	s.d.est.learn(p.Bucket, k, accepted)
	s.tried += float64(judged)
	s.kept += float64(accepted)
	if s.tried > localHorizon {
		s.tried, s.kept, s.expected = s.tried/2, s.kept/2, s.expected/2
	}
}

// Close implements Stream: the output still in the window joins the store (O(its length),
// about what indexing it took), and the index is let go.
func (s *SuffixStream) Close() {
	x := s.x
	if x == nil {
		return
	}
	s.x = nil
	from := max(s.prompt, x.lo())
	if from >= x.n {
		return
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	for p := from; p < x.n; p++ {
		s.d.store.add(x.at(p))
	}
	s.d.store.add(sep)
}
