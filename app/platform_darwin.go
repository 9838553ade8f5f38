//go:build darwin && cgo

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/progrium/darwinkit/macos/appkit"
	"github.com/progrium/darwinkit/macos/foundation"
	"github.com/progrium/darwinkit/objc"

	"github.com/lilyformac/lily/app/menu"
)

// macPlatform implements menu.Platform with AppKit and ServiceManagement; its methods run on the
// main thread (they are called from menu actions).
type macPlatform struct {
	app appkit.Application

	login     menu.LoginState // SMAppService's answer, cached: the menu redraws often
	loginRead time.Time
}

// loginTTL is how long a read of the login item's status is reused.
const loginTTL = 3 * time.Second

func (p *macPlatform) Copy(text string) {
	pb := appkit.Pasteboard_GeneralPasteboard()
	pb.ClearContents()
	pb.SetStringForType(text, appkit.PasteboardTypeString)
}

// Open opens a file or folder as Finder would: lily.log opens in Console.
func (p *macPlatform) Open(path string) error {
	if out, err := exec.Command("/usr/bin/open", path).CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Reveal selects a file in a Finder window (settings.json, for editing).
func (p *macPlatform) Reveal(path string) error {
	if out, err := exec.Command("/usr/bin/open", "-R", path).CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// infoString is a string of the bundle's Info.plist ("" when absent: a bare binary).
func infoString(key string) string {
	o := foundation.Bundle_MainBundle().ObjectForInfoDictionaryKey(key)
	if o.IsNil() {
		return ""
	}
	str := foundation.StringFrom(o.Ptr())
	return str.String()
}

// About shows the standard About panel with the version read from the bundle's Info.plist at
// run time (aboutVersion: a build without a release tag says which development build it is).
func (p *macPlatform) About() {
	bi, _ := debug.ReadBuildInfo()
	version := aboutVersion(infoString("CFBundleShortVersionString"), infoString("LilyGitDescribe"), bi)
	p.app.ActivateIgnoringOtherApps(true) // an accessory app must come forward to show a panel
	p.app.OrderFrontStandardAboutPanelWithOptions(map[appkit.AboutPanelOptionKey]objc.IObject{
		appkit.AboutPanelOptionApplicationVersion: foundation.String_StringWithString(version),
	})
}

func (p *macPlatform) Terminate() { p.app.Terminate(nil) }

// Confirm runs a modal alert with ok (the default) and cancel; the accessory app comes forward
// first, or the alert would open behind the frontmost app's windows.
func (p *macPlatform) Confirm(title, text, ok, cancel string) bool {
	p.app.ActivateIgnoringOtherApps(true)
	return showAlert(title, text, ok, cancel) == appkit.AlertFirstButtonReturn
}

// Notify posts a notification through osascript (notifyScript: darwinkit v0.5.0 has no
// UserNotifications binding); off the calling goroutine, as osascript takes a moment and Observe
// runs on the supervisor's. A failure only loses the notification: the menu shows the same.
func (p *macPlatform) Notify(title, body string) {
	go func() {
		if out, err := exec.Command("/usr/bin/osascript", "-e", notifyScript(title, body)).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "Lily: notification: %v: %s\n", err, strings.TrimSpace(string(out)))
		}
	}()
}

// Launch at login: SMAppService.mainAppService (macOS 13+; Lily needs 15), reached through the Objective-C
// runtime after loading ServiceManagement (darwinkit has no binding for it).

var (
	smOnce  sync.Once
	smClass objc.Class
)

// SMAppServiceStatus values.
const (
	smNotRegistered    = 0 // never registered, or unregistered
	smEnabled          = 1
	smRequiresApproval = 2
	smNotFound         = 3
)

// mainAppService returns SMAppService.mainAppService, or false when unavailable: not running
// from an app bundle (the service registers the bundle).
func mainAppService() (objc.Object, bool) {
	smOnce.Do(func() {
		foundation.Bundle_BundleWithPath("/System/Library/Frameworks/ServiceManagement.framework").Load()
		smClass = objc.GetClass("SMAppService")
	})
	if smClass.Ptr() == nil || !strings.HasSuffix(foundation.Bundle_MainBundle().BundlePath(), ".app") {
		return objc.Object{}, false
	}
	svc := objc.Call[objc.Object](smClass, objc.Sel("mainAppService"))
	return svc, !svc.IsNil()
}

func (p *macPlatform) LoginItem() menu.LoginState {
	if time.Since(p.loginRead) > loginTTL {
		p.login, p.loginRead = p.readLoginItem(), time.Now()
	}
	return p.login
}

func (p *macPlatform) readLoginItem() menu.LoginState {
	svc, ok := mainAppService()
	if !ok {
		return menu.LoginUnavailable
	}
	switch objc.Call[int](svc, objc.Sel("status")) {
	case smEnabled:
		return menu.LoginOn
	case smRequiresApproval:
		return menu.LoginNeedsApproval
	}
	return menu.LoginOff
}

func (p *macPlatform) SetLoginItem(on bool) error {
	p.loginRead = time.Time{} // read it afresh next time
	svc, ok := mainAppService()
	if !ok {
		return errors.New("needs Lily.app (in /Applications) on macOS 15 or later")
	}
	sel := "unregisterAndReturnError:"
	if on {
		sel = "registerAndReturnError:"
	}
	// The NSError out-parameter is left nil (no Go pointer crosses into Objective-C); the status
	// read afterwards says what happened.
	if objc.Call[bool](svc, objc.Sel(sel), unsafe.Pointer(nil)) {
		return nil
	}
	switch objc.Call[int](svc, objc.Sel("status")) {
	case smRequiresApproval:
		return errors.New("approve Lily in System Settings › General › Login Items")
	case smNotFound:
		return errors.New("macOS cannot find Lily.app's login item; move Lily.app to /Applications and try again")
	}
	if on {
		return errors.New("macOS refused to add Lily to the login items")
	}
	return errors.New("macOS refused to remove Lily from the login items")
}

func (p *macPlatform) OpenLoginItemsSettings() {
	p.loginRead = time.Time{}
	if _, ok := mainAppService(); ok {
		objc.Call[objc.Void](smClass, objc.Sel("openSystemSettingsLoginItems"))
	}
}
