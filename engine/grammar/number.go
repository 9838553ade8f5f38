package grammar

import (
	"fmt"
	"math"
)

// numSpec is a JSON number leaf. Values are sign and magnitude: the integer part of a number
// written with a sign s must lie in whole[s] to end there, and in frac[s] to take a fraction.
// Integer bounds are exact; for numbers a fraction is allowed only where every fraction keeps the
// value in bounds ([m, m+1) for m ≥ 0, (-m-1, -m] for -m), so 0.5 needs minimum ≤ 0 and
// maximum ≥ 1. The exponent is allowed only without bounds.
type numSpec struct {
	whole, frac [2]span // [0]: positive, [1]: negative
	digits      int     // most integer digits
	exp         bool
}

// span is an inclusive range of magnitudes; lo > hi is empty.
type span struct{ lo, hi int64 }

func (s span) empty() bool { return s.lo > s.hi }

const (
	maxFrac   = 15 // fraction digits
	maxExp    = 2  // exponent digits
	defDigits = 15 // integer digits without bounds: stays exact in a float64
)

// Frame states of a number: phase | negative<<4.
const (
	nStart = iota
	nSign  // after '-'
	nInt   // integer digits
	nDot
	nFrac
	nE
	nESign
	nExp
)

var pow10 [19]int64

func init() {
	pow10[0] = 1
	for i := 1; i < len(pow10); i++ {
		pow10[i] = pow10[i-1] * 10
	}
}

// bound is one side of a numeric range: nil when absent.
type bound struct {
	v         float64
	exclusive bool
}

// newNum builds a number leaf; integer limits to whole numbers.
func newNum(integer bool, lo, hi *bound) (*numSpec, error) {
	n := &numSpec{digits: defDigits, exp: !integer && lo == nil && hi == nil}
	for _, b := range []*bound{lo, hi} {
		if b != nil && math.Abs(b.v) >= 1e17 {
			return nil, fmt.Errorf("bound %v is beyond the supported range (±1e17)", b.v)
		}
		if b != nil {
			n.digits = max(n.digits, len(fmt.Sprint(int64(math.Abs(b.v)))))
		}
	}
	top := pow10[n.digits] - 1
	// Whole values J: J ≥ lo (> if exclusive), J ≤ hi.
	wlo, whi := -top, top
	if lo != nil {
		c := math.Ceil(lo.v)
		if lo.exclusive && c == lo.v {
			c++
		}
		wlo = max(wlo, int64(c))
	}
	if hi != nil {
		f := math.Floor(hi.v)
		if hi.exclusive && f == hi.v {
			f--
		}
		whi = min(whi, int64(f))
	}
	n.whole[0] = span{max(wlo, 0), whi}
	n.whole[1] = span{max(-whi, 1), -wlo} // "-0" is not written
	if !integer {
		// m.f ∈ [m, m+1): needs m ≥ lo (> if exclusive: m.0 is m) and m+1 ≤ hi.
		// -m.f ∈ (-m-1, -m]: needs -m ≤ hi (< if exclusive) and -m-1 ≥ lo.
		plo, phi, nlo, nhi := int64(0), top, int64(0), top
		if lo != nil {
			c := math.Ceil(lo.v)
			if lo.exclusive && c == lo.v {
				c++
			}
			plo = max(plo, int64(c))
			nhi = min(nhi, int64(math.Floor(-lo.v))-1)
		}
		if hi != nil {
			phi = min(phi, int64(math.Floor(hi.v))-1)
			f := math.Ceil(-hi.v)
			if hi.exclusive && f == -hi.v {
				f++
			}
			nlo = max(nlo, int64(f))
		}
		n.frac[0], n.frac[1] = span{plo, phi}, span{nlo, nhi}
	} else {
		n.frac = [2]span{{1, 0}, {1, 0}}
	}
	if n.whole[0].empty() && n.whole[1].empty() && n.frac[0].empty() && n.frac[1].empty() {
		return nil, fmt.Errorf("no %s lies within the bounds", map[bool]string{true: "integer", false: "number"}[integer])
	}
	return n, nil
}

// reach reports whether v (c ≥ 1 digits written) extends, within the digits left, into t.
func (n *numSpec) reach(v int64, c int, t span) bool {
	if t.empty() {
		return false
	}
	for k := 0; c+k <= n.digits; k++ {
		if lo, hi := v*pow10[k], v*pow10[k]+pow10[k]-1; lo <= t.hi && hi >= t.lo {
			return true
		}
		if v == 0 {
			break // "0" takes no more digits
		}
	}
	return false
}

// extends is the min number of digits (at least one) that take v, with c digits written, into
// t; -1 if none do.
func (n *numSpec) extends(v int64, c int, t span) int {
	if t.empty() || c > 0 && v == 0 {
		return -1
	}
	for k := 1; c+k <= n.digits; k++ {
		lo, hi := v*pow10[k], v*pow10[k]+pow10[k]-1
		if c == 0 && k > 1 {
			lo = pow10[k-1] // no leading zero
		}
		if lo <= t.hi && hi >= t.lo {
			return k
		}
	}
	return -1
}

func (t span) has(v int64) bool { return t.lo <= v && v <= t.hi }

// stepNum advances a number frame by byte b.
func (n *numSpec) step(f *frame, b byte) act {
	ph, neg := f.st&15, int(f.st>>4)
	digit := b >= '0' && b <= '9'
	switch ph {
	case nStart, nSign:
		if ph == nStart && b == '-' {
			if n.whole[1].empty() && n.frac[1].empty() {
				return aReject
			}
			f.st = nSign | 1<<4
			return aEat
		}
		if !digit {
			return aReject
		}
		return n.intDigit(f, neg, b)
	case nInt:
		switch {
		case digit:
			return n.intDigit(f, neg, b)
		case b == '.' && n.frac[neg].has(f.v):
			f.st, f.a = nDot|int32(neg)<<4, 0
			return aEat
		case (b == 'e' || b == 'E') && n.exp:
			f.st, f.a = nE|int32(neg)<<4, 0
			return aEat
		}
		if n.whole[neg].has(f.v) {
			return aPop
		}
	case nDot, nFrac:
		switch {
		case digit && f.a < maxFrac:
			f.st, f.a = nFrac|int32(neg)<<4, f.a+1
			return aEat
		case ph == nFrac && (b == 'e' || b == 'E') && n.exp:
			f.st, f.a = nE|int32(neg)<<4, 0
			return aEat
		case ph == nFrac:
			return aPop
		}
	case nE:
		if b == '+' || b == '-' {
			f.st = nESign | int32(neg)<<4
			return aEat
		}
		fallthrough
	case nESign, nExp:
		if digit && f.a < maxExp {
			f.st, f.a = nExp|int32(neg)<<4, f.a+1
			return aEat
		}
		if ph == nExp {
			return aPop
		}
	}
	return aReject
}

func (n *numSpec) intDigit(f *frame, neg int, b byte) act {
	v, c := f.v*10+int64(b-'0'), int(f.a)+1
	if f.st&15 == nInt && f.v == 0 && f.a == 1 || c > n.digits {
		return aReject // no leading zeros
	}
	if !n.reach(v, c, n.whole[neg]) && !n.reach(v, c, n.frac[neg]) {
		return aReject
	}
	f.st, f.a, f.v = nInt|int32(neg)<<4, int32(c), v
	return aEat
}

// rem is the min bytes to a complete number from f.
func (n *numSpec) rem(f *frame) int32 {
	ph, neg := f.st&15, int(f.st>>4)
	switch ph {
	case nStart:
		return n.minLen()
	case nSign:
		return n.intRem(0, 0, neg)
	case nInt:
		return n.intRem(f.v, int(f.a), neg)
	case nDot, nE, nESign:
		return 1
	}
	return 0
}

// intRem: the integer part so far is v with c digits.
func (n *numSpec) intRem(v int64, c, neg int) int32 {
	best := inf
	if c > 0 && n.whole[neg].has(v) {
		return 0
	}
	if c > 0 && n.frac[neg].has(v) {
		best = 2 // ".0"
	}
	if k := n.extends(v, c, n.whole[neg]); k > 0 {
		best = min(best, int32(k))
	}
	if k := n.extends(v, c, n.frac[neg]); k > 0 {
		best = min(best, int32(k)+2)
	}
	return best
}

func (n *numSpec) minLen() int32 {
	return min(n.intRem(0, 0, 0), 1+n.intRem(0, 0, 1))
}

// first is the set of bytes a number can start with.
func (n *numSpec) first() (s symset) {
	if !n.whole[1].empty() || !n.frac[1].empty() {
		s.add('-')
	}
	for d := byte('0'); d <= '9'; d++ {
		f := frame{}
		if n.step(&f, d) == aEat {
			s.add(int(d))
		}
	}
	return s
}
