package draft

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// randTokens returns n tokens drawn from [base, base+vocab).
func randTokens(r *rand.Rand, n, base, vocab int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = base + r.IntN(vocab)
	}
	return out
}

// distinct returns n consecutive ids from base: text with no repeat at all.
func distinct(base, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = base + i
	}
	return out
}

func TestSuffixDraftsCopiedPromptSpan(t *testing.T) {
	d := NewSuffix(SuffixOptions{})
	if d.Name() != "suffix" {
		t.Fatalf("name %q", d.Name())
	}
	prompt := distinct(1000, 200)
	s := d.Start(prompt)
	s.Commit(prompt[50:60]) // the output starts quoting the prompt
	p := s.Draft(7)
	// A 10-token match drafts 5 tokens: what followed the span in the prompt.
	if !slices.Equal(p.Tokens, prompt[60:65]) {
		t.Fatalf("draft %v, want %v", p.Tokens, prompt[60:65])
	}
	if len(p.Accept) != len(p.Tokens) || p.Bucket != lengthBucket(10) {
		t.Fatalf("accept %v bucket %d", p.Accept, p.Bucket)
	}
	// The draft follows the quote as it goes on, and a longer match earns a longer draft.
	s.Commit(prompt[60:70])
	if p := s.Draft(7); !slices.Equal(p.Tokens, prompt[70:77]) || p.Bucket != lengthBucket(20) {
		t.Fatalf("after 20 quoted: %v bucket %d", p.Tokens, p.Bucket)
	}
	if p := s.Draft(3); len(p.Tokens) != 3 {
		t.Fatalf("limit 3 gave %d tokens", len(p.Tokens))
	}
}

func TestSuffixShortMatchShortDraft(t *testing.T) {
	prompt := distinct(1000, 50)
	s := NewSuffix(SuffixOptions{}).Start(prompt)
	s.Commit([]int{7, 1010, 1011}) // a 2-token match
	if p := s.Draft(7); !slices.Equal(p.Tokens, []int{1012}) || p.Bucket != 0 {
		t.Fatalf("2-token match drafted %v (bucket %d), want one token", p.Tokens, p.Bucket)
	}
	if p := NewSuffix(SuffixOptions{MinMatch: 3}).Start(append(prompt, 7, 1010, 1011)).Draft(7); len(p.Tokens) != 0 {
		t.Fatalf("MinMatch 3 drafted %v on a 2-token match", p.Tokens)
	}
}

func TestSuffixNoMatchNoDraft(t *testing.T) {
	s := NewSuffix(SuffixOptions{}).Start(distinct(1000, 300))
	s.Commit([]int{5}) // a token the prompt never had
	if p := s.Draft(7); p.Tokens != nil || p.Accept != nil {
		t.Fatalf("drafted %+v with nothing to match", p)
	}
	s.Commit([]int{1000}) // one token of the prompt is below the minimum match
	if p := s.Draft(7); len(p.Tokens) != 0 {
		t.Fatalf("drafted %v on a 1-token match", p.Tokens)
	}
	if p := NewSuffix(SuffixOptions{}).Start(nil).Draft(7); len(p.Tokens) != 0 {
		t.Fatalf("empty sequence drafted %v", p.Tokens)
	}
}

func TestSuffixDraftStopsAtKnownEnd(t *testing.T) {
	// Inside the sequence: the newest longest match of "a b c" ends 3 tokens before the end.
	abc := []int{1, 2, 3}
	prompt := append(distinct(1000, 20), slices.Repeat(abc, 4)...)
	s := NewSuffix(SuffixOptions{}).Start(prompt)
	if p := s.Draft(7); !slices.Equal(p.Tokens, abc) {
		t.Fatalf("periodic tail drafted %v, want %v (the 9-token match earns 4, 3 are known)", p.Tokens, abc)
	}
	// In the store: an output's last tokens draft no further than its end.
	d := NewSuffix(SuffixOptions{})
	out := distinct(5000, 20)
	a := d.Start(distinct(1000, 10))
	a.Commit(out)
	a.Close()
	b := d.Start(distinct(9000, 10))
	b.Commit(out[:18])
	if p := b.Draft(7); !slices.Equal(p.Tokens, out[18:]) {
		t.Fatalf("store drafted %v, want the output's last 2 tokens %v", p.Tokens, out[18:])
	}
}

func TestSuffixStoreServesClosedOutputs(t *testing.T) {
	d := NewSuffix(SuffixOptions{})
	out := distinct(5000, 40)
	a := d.Start(distinct(1000, 30))
	a.Commit(out)
	b := d.Start(distinct(3000, 30))
	b.Commit(out[:12])
	if p := b.Draft(7); len(p.Tokens) != 0 {
		t.Fatalf("drafted %v from a sequence still running", p.Tokens)
	}
	a.Close()
	p := b.Draft(7)
	if !slices.Equal(p.Tokens, out[12:18]) || p.Bucket != fromStore+lengthBucket(12) {
		t.Fatalf("store drafted %v bucket %d, want %v from the store's bucket", p.Tokens, p.Bucket, out[12:18])
	}
	// The prompt of a closed sequence is not in the store: only its output.
	c := d.Start(distinct(8000, 5))
	c.Commit(distinct(1000, 10))
	if p := c.Draft(7); len(p.Tokens) != 0 {
		t.Fatalf("drafted %v from a closed sequence's prompt", p.Tokens)
	}
	// A sequence's own match beats an equally long one in the store.
	own := append(distinct(5000, 12), 77, 78)
	e := d.Start(own)
	e.Commit(distinct(5000, 12))
	if p := e.Draft(7); len(p.Tokens) < 2 || !slices.Equal(p.Tokens[:2], []int{77, 78}) || p.Bucket >= fromStore {
		t.Fatalf("own match lost to the store: %v bucket %d", p.Tokens, p.Bucket)
	}
}

func TestSuffixStoreEvictsOldest(t *testing.T) {
	d := NewSuffix(SuffixOptions{StoreTokens: 256})
	outs := make([][]int, 4)
	for i := range outs {
		outs[i] = distinct(10000*(i+1), 100)
		s := d.Start(distinct(100, 5))
		s.Commit(outs[i])
		s.Close()
	}
	// 4 outputs of 101 tokens with their ends overflow 256: the first is gone, the last stays.
	s := d.Start(nil)
	s.Commit(outs[0][:20])
	if p := s.Draft(7); len(p.Tokens) != 0 {
		t.Fatalf("evicted output still drafts %v", p.Tokens)
	}
	s.Commit(outs[3][:20])
	if p := s.Draft(7); !slices.Equal(p.Tokens, outs[3][20:27]) {
		t.Fatalf("newest output drafted %v", p.Tokens)
	}
	if b := d.StoreBytes(); b > 256*20+1024 {
		t.Fatalf("store holds %d bytes for 256 tokens", b)
	}
}

func TestSuffixFeedbackMovesEstimate(t *testing.T) {
	d := NewSuffix(SuffixOptions{})
	prompt := distinct(1000, 100)
	draft := func() Proposal {
		s := d.Start(prompt)
		s.Commit(prompt[10:30]) // a 20-token match: bucket 17+
		return s.Draft(7)
	}
	cold := draft()
	// A fresh stream doubts: the drafter's estimate weighs localWeight against localDoubt
	// rejections of its own.
	doubt := float64(localWeight) / float64(localWeight+localDoubt)
	if len(cold.Tokens) != 7 || math.Abs(cold.Accept[0]-priorAccept[4]*doubt) > 1e-12 {
		t.Fatalf("cold: %v %v", cold.Tokens, cold.Accept)
	}
	// Cold, short matches estimate below the ~0.27 at which one drafted token pays for its row.
	if priorAccept[0] >= 0.27 || priorAccept[1] >= 0.27 {
		t.Fatalf("short-match prior %v would draft cold", priorAccept[:2])
	}
	s := d.Start(prompt)
	for range 50 {
		s.Feedback(Proposal{Tokens: cold.Tokens[:1], Bucket: cold.Bucket}, 1)
	}
	warm := draft()
	if warm.Accept[0] <= 0.9*doubt || warm.Accept[6] <= cold.Accept[6] {
		t.Fatalf("all accepted, yet estimates %v (cold %v)", warm.Accept, cold.Accept)
	}
	// The stream that saw its drafts kept trusts them beyond the drafter's estimate's doubt.
	s.Commit(prompt[10:30])
	if own := s.Draft(7); own.Accept[0] <= 0.9 {
		t.Fatalf("a stream whose drafts were all kept estimates %v", own.Accept[0])
	}
	for range 200 {
		s.Feedback(cold, 0)
	}
	if p := draft(); p.Accept[0] >= cold.Accept[0] {
		t.Fatalf("all rejected, yet estimate %v", p.Accept[0])
	}
	// Other buckets are untouched.
	o := d.Start(prompt)
	o.Commit(prompt[10:13])
	if p := o.Draft(7); math.Abs(p.Accept[0]-priorAccept[1]*doubt) > 1e-12 {
		t.Fatalf("bucket 3-4 moved to %v", p.Accept[0])
	}
}

func TestEstimatorPerPosition(t *testing.T) {
	e := newEstimator(2)
	// Drafts of 4 where the first token always passes and the second always fails.
	for range 100 {
		e.learn(1, 4, 1)
	}
	a := e.fill(1, 4)
	if a[0] < 0.9 || a[1] > 0.2 {
		t.Fatalf("estimates %v: position 0 always kept, 1 never", a)
	}
	// Positions 2 and 3 were never verified: they lean on the bucket's pooled rate (100 of
	// 200 verified tokens kept), not on the prior.
	if a[2] < 0.4 || a[2] > 0.6 || a[2] != a[3] {
		t.Fatalf("unverified positions %v", a[2:])
	}
	if b := e.fill(0, 1); b[0] != priorAccept[0] {
		t.Fatalf("bucket 0 moved to %v", b[0])
	}
}

func TestSuffixMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var classes [agreeClasses]int
	for trial := range 300 {
		vocab := 3 + trial%3 // short enough chains that the probe limit sees every match
		seq := randTokens(r, 20+r.IntN(150), 0, vocab)
		p := NewSuffix(SuffixOptions{}).Start(seq).Draft(7)
		// The newest of the longest earlier matches, up to 32 tokens.
		best, bestN := -1, 0
		for q := len(seq) - 2; q >= 0; q-- {
			n := 0
			for n < maxMatch && q-n >= 0 && seq[q-n] == seq[len(seq)-1-n] {
				n++
			}
			if n > bestN {
				best, bestN = q, n
			}
		}
		if bestN < 2 {
			if len(p.Tokens) != 0 {
				t.Fatalf("trial %d: drafted %v with no match", trial, p.Tokens)
			}
			continue
		}
		want := seq[best+1 : min(len(seq), best+1+min(7, max(1, bestN/2)))]
		// The context's other occurrences (matching min(bestN, longKey) tokens): how many, and
		// how many go on as the newest longest does.
		seen, same := 0, 0
		for q := len(seq) - 2; q >= 0; q-- {
			n := 0
			for n < min(bestN, longKey) && q-n >= 0 && seq[q-n] == seq[len(seq)-1-n] {
				n++
			}
			if n == min(bestN, longKey) {
				seen++
				if seq[q+1] == seq[best+1] {
					same++
				}
			}
		}
		bucket := lengthBucket(bestN) + 2*lengthBuckets*agreeClass(seen, same)
		classes[agreeClass(seen, same)]++
		if !slices.Equal(p.Tokens, want) || p.Bucket != bucket {
			t.Fatalf("trial %d %v: drafted %v bucket %d, want %v bucket %d (match %d at %d, context seen %d times, %d going on alike)",
				trial, seq, p.Tokens, p.Bucket, want, bucket, bestN, best, seen, same)
		}
	}
	if slices.Contains(classes[:], 0) {
		t.Fatalf("drafts by agreement class %v: want each", classes)
	}
}

func TestSuffixWindowBoundsMemory(t *testing.T) {
	d := NewSuffix(SuffixOptions{Window: 1 << 12})
	r := rand.New(rand.NewPCG(3, 4))
	early := randTokens(r, 40, 0, 1<<20)
	s := d.Start(early).(*SuffixStream)
	body := randTokens(r, 5000, 0, 1<<20)
	s.Commit(body)
	if b := s.Bytes(); b > 20<<12+1024 {
		t.Fatalf("a 4096-token window holds %d bytes", b)
	}
	s.Commit(early[:20]) // fell out of the window: no longer draftable
	if p := s.Draft(7); len(p.Tokens) != 0 {
		t.Fatalf("drafted %v from outside the window", p.Tokens)
	}
	recent := body[len(body)-300 : len(body)-250] // the window's recent text still drafts
	s.Commit(recent[:20])
	if p := s.Draft(7); !slices.Equal(p.Tokens, recent[20:27]) {
		t.Fatalf("recent span drafted %v, want %v", p.Tokens, recent[20:27])
	}
}

func TestSuffixBytesMatchHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	prompt := randTokens(r, 100_000, 0, 150_000)
	d := NewSuffix(SuffixOptions{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := d.Start(prompt).(*SuffixStream)
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	runtime.KeepAlive(prompt) // else its 800 kB is freed in between
	b := s.Bytes()
	if diff := heap - b; diff < -b/20 || diff > b/20 {
		t.Fatalf("Bytes %d, heap grew %d", b, heap)
	}
	if b > 16<<20 {
		t.Fatalf("100k-token prompt takes %d bytes", b)
	}
	// The largest window at its fullest stays under 16 MB a sequence.
	full := NewSuffix(SuffixOptions{Window: 1 << 30}).Start(nil).(*SuffixStream)
	full.Commit(randTokens(r, maxWindow+1000, 0, 150_000))
	if fb := full.Bytes(); fb > 16<<20 {
		t.Fatalf("full window takes %d bytes", fb)
	}
	runtime.KeepAlive(s)
	s.Close()
	if s.Bytes() != 0 {
		t.Fatalf("closed stream holds %d bytes", s.Bytes())
	}
}

func TestSuffixConcurrentStreams(t *testing.T) {
	d := NewSuffix(SuffixOptions{StoreTokens: 1 << 12})
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for range 20 {
				prompt := randTokens(r, 300, 0, 1<<20)
				s := d.Start(prompt)
				for i := 100; i < 200; i += 5 {
					p := s.Draft(7)
					if i >= 105 && (len(p.Tokens) == 0 || p.Tokens[0] != prompt[i]) {
						errs <- "lost the quote"
						return
					}
					s.Commit(prompt[i : i+5])
					s.Feedback(p, r.IntN(len(p.Tokens)+1))
					_ = d.StoreBytes()
				}
				s.Close()
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func TestSuffixPositionsPast32Bits(t *testing.T) {
	// Chains keep positions' low 32 bits: a long-lived store crosses 2^32 tokens.
	s := NewSuffix(SuffixOptions{Window: 256}).Start(nil).(*SuffixStream)
	s.x.n = 1<<32 - 100
	text := distinct(1000, 200)
	s.Commit(text)
	s.Commit(text[90:110]) // a span straddling the wrap
	if p := s.Draft(7); !slices.Equal(p.Tokens, text[110:117]) {
		t.Fatalf("drafted %v across the wrap, want %v", p.Tokens, text[110:117])
	}
}
