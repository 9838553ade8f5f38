package mtl

import "fmt"

// Span is the byte range [Off, Off+Len).
type Span struct{ Off, Len int }

// End returns Off+Len.
func (s Span) End() int { return s.Off + s.Len }

// NoCopyPlan says how to put bytes [off, off+n) of a page-aligned mapping (an mmap'd weights
// file) on the GPU with as little copying as possible.
//
// Wrap mapping[Window.Off:Window.End()] with Device.NewBufferNoCopy; byte off is at Offset in
// that buffer. The window starts at the page boundary at or below off (the bytes before off
// are simply not used) and ends at a page boundary no further than the mapping's last whole
// page. Copy holds the bytes of the range past the window's end: copy them once into a shared
// buffer. A tensor [a, b) of the range can be bound from the window, at Offset+(a-off), when
// b <= Window.End(); one that crosses Window.End() must be copied whole.
type NoCopyPlan struct {
	Window Span // page-aligned offset and length; Len 0 when no whole page is usable
	Offset int  // position of byte off inside the window
	Copy   Span // remainder past the window; Len 0 when none
}

// PlanNoCopy plans bytes [off, off+n) of a mapping of mapLen bytes whose base address is
// page-aligned. The kernel maps a file's last partial page whole (zero-filled past the end),
// so callers that created the mapping with mmap may pass mapLen rounded up to pageSize and get
// an empty Copy; pass the exact length when that is not certain. Ranges longer than the
// device's MaxBufferLength must be split by the caller.
func PlanNoCopy(mapLen, off, n, pageSize int) (NoCopyPlan, error) {
	switch {
	case pageSize <= 0 || pageSize&(pageSize-1) != 0:
		return NoCopyPlan{}, fmt.Errorf("mtl: page size %d is not a power of two", pageSize)
	case off < 0 || n < 0 || off > mapLen-n:
		return NoCopyPlan{}, fmt.Errorf("mtl: range [%d, %d+%d) is outside a mapping of %d bytes", off, off, n, mapLen)
	case n == 0:
		return NoCopyPlan{}, nil
	}
	mask := pageSize - 1
	start := off &^ mask
	end := min((off+n+mask)&^mask, mapLen&^mask)
	if end <= start {
		return NoCopyPlan{Copy: Span{off, n}}, nil
	}
	p := NoCopyPlan{Window: Span{start, end - start}, Offset: off - start}
	if off+n > end {
		p.Copy = Span{end, off + n - end}
	}
	return p, nil
}
