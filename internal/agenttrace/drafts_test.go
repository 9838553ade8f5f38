package agenttrace

import (
	"math/rand/v2"
	"testing"

	"github.com/lilyformac/lily/engine/draft"
)

// cheapRows is a step whose every further row costs a tenth of the first: drafting is nearly
// free, so the gate drafts as long as acceptance holds up.
type cheapRows struct{}

func (cheapRows) Step(groups []draft.Group) float64 {
	c := 0.0
	for _, g := range groups {
		c += 1 + 0.1*float64(g.Rows-1)
	}
	return c
}

func randomTokens(r *rand.Rand, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1000 + r.IntN(100_000)
	}
	return out
}

// copyTurns: turn 1's reply quotes 400 tokens of its prompt; turn 2's prompt is fresh and its
// reply repeats turn 1's, which only the drafter's store of finished outputs holds.
func copyTurns() []Forced {
	r := rand.New(rand.NewPCG(5, 5))
	quote := randomTokens(r, 400)
	p1 := append(append(randomTokens(r, 300), quote...), randomTokens(r, 300)...)
	reply := append([]int{7}, quote...)
	return []Forced{{Turn: 1, Prompt: p1, Reply: reply}, {Turn: 2, Prompt: randomTokens(r, 500), Reply: reply}}
}

// TestDraftsCountSteps: every step commits its accepted drafts and one token more, so the
// steps and accepted tokens add up to the tokens decoded, whatever the cost.
func TestDraftsCountSteps(t *testing.T) {
	for _, cost := range []draft.Cost{draft.LinearCost{}, cheapRows{}} {
		for _, d := range Drafts(copyTurns(), cost) {
			if d.Tokens != 400 || d.Steps+d.Accepted != d.Tokens || d.Accepted > d.Drafted || d.Plain <= 0 {
				t.Errorf("%T turn %d: %+v", cost, d.Turn, d)
			}
		}
	}
}

// TestDraftsLinearCostNeverDrafts: where every row costs as much as a step, no draft can pay,
// so the gate drafts nothing and the replay costs what plain decoding does.
func TestDraftsLinearCostNeverDrafts(t *testing.T) {
	for _, d := range Drafts(copyTurns(), draft.LinearCost{}) {
		if d.Drafted != 0 || d.Speedup() != 1 {
			t.Errorf("turn %d: %+v, speed-up %g", d.Turn, d, d.Speedup())
		}
	}
}

// TestDraftsCopy: quoted text is drafted once the acceptance estimates have learnt it pays,
// from the prompt in turn 1 and from the store in turn 2. At full acceptance a step here gives 8
// tokens for 1.7; the ramp from the cold estimates takes some of that.
func TestDraftsCopy(t *testing.T) {
	for _, d := range Drafts(copyTurns(), cheapRows{}) {
		if tps := float64(d.Tokens) / float64(d.Steps); d.Speedup() < 2.5 || tps < 4 {
			t.Errorf("turn %d: %+v: speed-up %.2f, %.2f tokens a step", d.Turn, d, d.Speedup(), tps)
		}
	}
}
