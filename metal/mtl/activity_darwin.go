//go:build darwin

package mtl

import (
	"sync"

	"github.com/ebitengine/purego/objc"
)

// nsActivityUserInitiated is NSActivityUserInitiated: work the user asked for, which includes
// NSActivityIdleSystemSleepDisabled.
const nsActivityUserInitiated = 0x00FFFFFF | 1<<20

var (
	selProcessInfo   = objc.RegisterName("processInfo")
	selBeginActivity = objc.RegisterName("beginActivityWithOptions:reason:")
	selEndActivity   = objc.RegisterName("endActivity:")
)

// BeginActivity tells macOS the process is doing user-initiated work until end is called
// (NSProcessInfo beginActivityWithOptions:reason:). A process without a window is otherwise
// treated as background work: App Nap, and GPU clocks seen dropping from 1,620 to 1,240 MHz after
// about 90 s of generating. The activity also keeps the Mac from idle-sleeping mid-answer, so it
// is held only while there is work. Without the Objective-C runtime it does nothing.
func BeginActivity(reason string) (end func()) {
	if load() != nil {
		return func() {}
	}
	info := objc.ID(objc.GetClass("NSProcessInfo"))
	var act objc.ID
	withPool(func() {
		pi := objc.ID(msg0(info, selProcessInfo))
		s, err := nsString(reason)
		if err != nil {
			return // no activity rather than an exception
		}
		act = retain(objc.ID(send(pi, selBeginActivity, nsActivityUserInitiated, uintptr(s))))
		release(s)
	})
	if act == 0 {
		return func() {}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			withPool(func() {
				msg1(objc.ID(msg0(info, selProcessInfo)), selEndActivity, uintptr(act))
				release(act)
			})
		})
	}
}
