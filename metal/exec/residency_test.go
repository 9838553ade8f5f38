package exec

import (
	"fmt"
	"strings"
	"testing"
)

// fakeSet records the residency-set calls.
type fakeSet struct{ calls []string }

func (s *fakeSet) Add(b int)          { s.calls = append(s.calls, fmt.Sprint("add ", b)) }
func (s *fakeSet) Remove(b int)       { s.calls = append(s.calls, fmt.Sprint("remove ", b)) }
func (s *fakeSet) Commit()            { s.calls = append(s.calls, "commit") }
func (s *fakeSet) RequestResidency()  { s.calls = append(s.calls, "request") }
func (s *fakeSet) take() (c []string) { c, s.calls = s.calls, nil; return c }

// TestResidencyBookkeeping: wrapped buffers join the set uncommitted and are committed in one
// batch, with residency requested, before the next command buffer; a buffer added twice is added
// once; one freed leaves the set with a commit at once (before its release); flushing with
// nothing new does nothing; and with no set (macOS before 15) nothing is called.
func TestResidencyBookkeeping(t *testing.T) {
	set := &fakeSet{}
	r := residency[int]{set: set}
	r.add(1)
	r.add(2)
	r.add(1)
	if got := strings.Join(set.take(), ", "); got != "add 1, add 2" {
		t.Fatalf("after three adds: %s", got)
	}
	r.flush()
	if got := strings.Join(set.take(), ", "); got != "commit, request" {
		t.Fatalf("first flush: %s", got)
	}
	r.flush()
	if got := set.take(); len(got) != 0 {
		t.Fatalf("flush with nothing new: %v", got)
	}
	r.remove(2)
	r.remove(3) // never added
	if got := strings.Join(set.take(), ", "); got != "remove 2, commit" {
		t.Fatalf("remove: %s", got)
	}
	r.add(2)
	r.flush()
	if got := strings.Join(set.take(), ", "); got != "add 2, commit, request" {
		t.Fatalf("re-add: %s", got)
	}
	var none residency[int]
	none.add(1)
	none.flush()
	none.remove(1) // no set: nothing to call, nothing to panic on
}
