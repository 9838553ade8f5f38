package draft

import "testing"

// recorder is a Stream that records its Feedback.
type recorder struct {
	Stream
	got []int
}

func (r *recorder) Feedback(p Proposal, accepted int) {
	r.got = append(r.got, len(p.Tokens)*100+accepted)
}

// TestShadowJudges: a proposal is judged against the tokens committed after it: a mismatch at
// the third token reports 2 of 4 kept, across several commits; a fully matched one reports all;
// a proposal offered while one is open is ignored; nothing is reported before the verdict.
func TestShadowJudges(t *testing.T) {
	var sh Shadow
	r := &recorder{}
	sh.Offer(Proposal{Tokens: []int{1, 2, 3, 4}})
	sh.Offer(Proposal{Tokens: []int{9}}) // ignored: one is open
	sh.Commit(r, []int{1})
	sh.Commit(r, []int{2})
	if len(r.got) != 0 {
		t.Fatalf("reported before the verdict: %v", r.got)
	}
	sh.Commit(r, []int{7, 3})
	sh.Offer(Proposal{Tokens: []int{5, 6}})
	sh.Commit(r, []int{5, 6, 8})
	sh.Commit(r, []int{1})
	if want := []int{402, 202}; len(r.got) != 2 || r.got[0] != want[0] || r.got[1] != want[1] {
		t.Fatalf("feedback %v, want %v", r.got, want)
	}
}
