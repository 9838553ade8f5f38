package steer

import (
	"slices"
	"testing"
)

// run feeds a steer a model's tokens, letting it force some, and returns what was generated.
func run(s Step, model []int) []int {
	var out []int
	for _, id := range model {
		if forced, ok, _ := s.Next(); ok {
			id = forced
		}
		s.Accept(id)
		out = append(out, id)
	}
	return out
}

func TestBudgetClosesReasoning(t *testing.T) {
	const end = 99
	closing := []int{10, end, 11}
	got := run(NewBudget(3, end, closing, true), []int{1, 2, 3, 4, 5, 6, 7, 8})
	if want := []int{1, 2, 3, 10, end, 11, 7, 8}; !slices.Equal(got, want) {
		t.Fatalf("generated %v, want %v", got, want)
	}
	// The model closes its reasoning itself within the budget: nothing is forced.
	if got := run(NewBudget(3, end, closing, true), []int{1, end, 3, 4, 5, 6}); !slices.Equal(got, []int{1, end, 3, 4, 5, 6}) {
		t.Fatalf("generated %v", got)
	}
	// Not reasoning (thinking off): never forced.
	if got := run(NewBudget(1, end, closing, false), []int{1, 2, 3}); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("generated %v", got)
	}
}

type mask []uint64

func (m mask) Next() (int, bool, []uint64) { return 0, false, m }
func (m mask) Accept(int) error            { return nil }

func TestChain(t *testing.T) {
	b := NewBudget(1, 99, []int{99}, true)
	c := Chain{mask{5}, b}
	if _, ok, allowed := c.Next(); ok || !slices.Equal(allowed, []uint64{5}) {
		t.Fatalf("before the budget: forced %v, allowed %v", ok, allowed)
	}
	c.Accept(1) // the budget is spent: its force wins over the mask
	if id, ok, _ := c.Next(); !ok || id != 99 {
		t.Fatalf("after the budget: %d %v", id, ok)
	}
}
