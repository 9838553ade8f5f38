//go:build darwin && cgo

package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/progrium/darwinkit/dispatch"
	"github.com/progrium/darwinkit/macos/appkit"
	"github.com/progrium/darwinkit/macos/foundation"
	"github.com/progrium/darwinkit/objc"

	"github.com/lilyformac/lily/app/gpulimit"
	"github.com/lilyformac/lily/app/instance"
	"github.com/lilyformac/lily/app/menu"
)

// AppKit must run on the main OS thread: lock it before main runs.
func init() { runtime.LockOSThread() }

// onMain runs f on the main queue (AppKit objects may only be touched there). Callers on other
// goroutines get an autorelease pool for the dispatch call itself; f runs inside the main run
// loop's pool.
func onMain(f func()) {
	objc.WithAutoreleasePool(func() { dispatch.MainQueue().DispatchAsync(f) })
}

func main() {
	var nsapp appkit.Application
	objc.WithAutoreleasePool(func() { nsapp = appkit.Application_SharedApplication() }) // no run loop (and pool) yet
	platform := &macPlatform{app: nsapp}
	var ui *statusUI
	var pending sync.Mutex
	redrawQueued := false
	// redraw coalesces bursts of snapshots (progress during a download) into one render.
	redraw := func() {
		pending.Lock()
		if redrawQueued {
			pending.Unlock()
			return
		}
		redrawQueued = true
		pending.Unlock()
		onMain(func() {
			pending.Lock()
			redrawQueued = false
			pending.Unlock()
			if ui != nil {
				ui.render()
			}
		})
	}
	a, err := setup(defaultEnvironment("darwin"), platform, redraw)
	if errors.Is(err, instance.ErrRunning) {
		// Another Lily.app runs (a second copy, or one in Downloads beside the one in Applications): say
		// so and leave, rather than run a second menu and a second 19.4 GB engine.
		title, text := runningAlert(err)
		objc.WithAutoreleasePool(func() {
			nsapp.SetActivationPolicy(appkit.ApplicationActivationPolicyAccessory)
			nsapp.ActivateIgnoringOtherApps(true) // an accessory app must come forward to show an alert
			showAlert(title, text, "OK")
		})
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "Lily:", err)
		os.Exit(1)
	}
	// Where the engine fails because macOS lets the GPU wire too little memory (a 24 GB Mac), the
	// menu's Fix item offers to raise the limit: one administrator prompt (osascript) runs the
	// sysctl, then the engine restarts.
	a.ctrl.GPULimit = gpulimit.System{}

	terminating := false
	delegate := &appkit.ApplicationDelegate{}
	delegate.SetApplicationDidFinishLaunching(func(foundation.Notification) {
		// The status item is created here, not earlier (macOS 15 asserts otherwise).
		ui = newStatusUI(a.ctrl, a.resources)
		a.begin()
		if a.ctrl.Translocated {
			// Ask once per launch; the menu keeps the item until Lily runs from elsewhere.
			title, text := moveAlert()
			nsapp.ActivateIgnoringOtherApps(true)
			if showAlert(title, text, "Show in Finder", "Not Now") == appkit.AlertFirstButtonReturn {
				a.ctrl.Click(menu.MoveToApplications)
			}
		}
	})
	// Opening Lily.app again while it runs (Finder, Spotlight, the Dock) reaches this, not a second
	// copy: show the menu, or the status where the icon is hidden (the notch, a menu-bar manager).
	delegate.SetApplicationShouldHandleReopenHasVisibleWindows(func(appkit.Application, bool) bool {
		if ui != nil {
			ui.reopen(nsapp)
		}
		return false // no windows for AppKit to restore
	})
	delegate.SetApplicationShouldTerminate(func(sender appkit.Application) appkit.ApplicationTerminateReply {
		// Quit, logout or SIGTERM: stop the engine first (SIGTERM, SIGKILL after stopTimeout),
		// then let AppKit finish.
		if !terminating {
			terminating = true
			a.logf("quitting")
			a.ctrl.Shutdown(stopTimeout+5*time.Second, func() {
				onMain(func() { sender.ReplyToApplicationShouldTerminate(true) })
			})
		}
		return appkit.TerminateLater
	})
	delegate.SetApplicationWillTerminate(func(foundation.Notification) {
		a.logf("bye")
		a.log.Close()
	})

	objc.WithAutoreleasePool(func() {
		nsapp.SetActivationPolicy(appkit.ApplicationActivationPolicyAccessory) // no Dock icon, even when run outside the bundle
		nsapp.SetDelegate(delegate)
	})

	// A SIGTERM or Ctrl-C to the app takes the same path as Quit.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sigs
		onMain(func() { nsapp.Terminate(nil) })
	}()

	nsapp.Run()
}

// showAlert runs a modal alert with the given buttons (the first is the default) and returns the
// button pressed: appkit.AlertFirstButtonReturn, then +1 for each next one.
func showAlert(title, text string, buttons ...string) appkit.ModalResponse {
	alert := appkit.NewAlert()
	alert.SetMessageText(title)
	alert.SetInformativeText(text)
	for _, b := range buttons {
		alert.AddButtonWithTitle(b)
	}
	return alert.RunModal()
}
