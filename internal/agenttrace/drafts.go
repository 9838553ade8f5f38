package agenttrace

import "github.com/lilyformac/lily/engine/draft"

// DraftTurn is what drafting did to one teacher-forced turn: the decode steps the reply took,
// the tokens drafted and accepted in them, and the modeled cost of those steps against plain
// decoding's (one one-row step per token at the same contexts), in the Cost's units.
type DraftTurn struct {
	Turn                     int
	Tokens                   int // decoded: the reply's tokens after the first, which the prefill gives
	Steps, Drafted, Accepted int
	Cost, Plain              float64
}

// Speedup is plain decoding's modeled cost over drafting's (1 for a turn with no decode step).
func (t DraftTurn) Speedup() float64 {
	if t.Cost <= 0 {
		return 1
	}
	return t.Plain / t.Cost
}

// Add sums u into t (a total over turns).
func (t *DraftTurn) Add(u DraftTurn) {
	t.Tokens += u.Tokens
	t.Steps += u.Steps
	t.Drafted += u.Drafted
	t.Accepted += u.Accepted
	t.Cost += u.Cost
	t.Plain += u.Plain
}

// Drafts replays turns teacher-forced through the suffix drafter and a gate over cost, one
// sequence at a time, as the engine loop drafts for a request running alone: each turn's stream
// starts on its prompt and is closed after its reply (its output joins the drafter's store for
// the turns after it). At every step the gate picks K from the stream's proposal, and the drafts
// that equal the reply's next tokens are accepted, with the reply's token after them (what
// verification keeps when the model generates the reply).
func Drafts(turns []Forced, cost draft.Cost) []DraftTurn {
	d, g := draft.NewSuffix(draft.SuffixOptions{}), draft.NewGate(cost)
	out := make([]DraftTurn, len(turns))
	for i, f := range turns {
		out[i] = draftTurn(d, g, f)
	}
	return out
}

// draftTurn decodes f.Reply after its first token, which the prefill of f.Prompt chose.
func draftTurn(d draft.Drafter, g *draft.Gate, f Forced) DraftTurn {
	res := DraftTurn{Turn: f.Turn}
	s := d.Start(f.Prompt)
	defer s.Close()
	if len(f.Reply) == 0 {
		return res
	}
	s.Commit(f.Reply[:1])
	var track draft.Track
	var shadow draft.Shadow // judges the proposals the gate does not verify, as the engine loop does
	cands, ks := make([]draft.Candidate, 1), make([]int, 0, 1)
	one := make([]draft.Group, 1)
	for done := 1; done < len(f.Reply); {
		ctx := len(f.Prompt) + done - 1 // the last committed token's row is the step's first
		p := s.Draft(draft.MaxRows - 1)
		cands[0] = draft.Candidate{Track: &track, Ctx: ctx, Draft: p}
		ks = g.Choose(cands, ks)
		k := ks[0]
		cost, _, _ := g.Planned()
		next := f.Reply[done:]
		a := 0 // the reply ends at its last token: no draft after it adds one
		for a < k && a < len(next)-1 && p.Tokens[a] == next[a] {
			a++
		}
		if k > 0 {
			p.Tokens, p.Accept = p.Tokens[:k], p.Accept[:k]
			s.Feedback(p, a)
		} else {
			shadow.Offer(p)
		}
		g.Observe(&track, k, a, cost)
		s.Commit(next[:a+1])
		shadow.Commit(s, next[:a+1])
		for j := range a + 1 { // plain decoding: a one-row step for each of these tokens
			one[0] = draft.Group{Rows: 1, Ctx: ctx + j}
			res.Plain += g.Cost.Step(one)
		}
		res.Steps++
		res.Drafted += k
		res.Accepted += a
		res.Cost += cost
		done += a + 1
	}
	res.Tokens = len(f.Reply) - 1
	return res
}
