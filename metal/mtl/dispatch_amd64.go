//go:build darwin && amd64

package mtl

import (
	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// On x86-64 an MTLSize argument is passed in memory on the stack, not by pointer; purego's
// reflective struct support lays that out. Slower and allocating, but Intel Macs are not a
// Lily target; this only keeps the package correct there.
var sendSizes func(id objc.ID, sel objc.SEL, a, b Size)

func registerArch() { purego.RegisterFunc(&sendSizes, rt.msgSend) }

func (e *ComputeEncoder) dispatch(sel objc.SEL, a, b Size) { sendSizes(e.id, sel, a, b) }
