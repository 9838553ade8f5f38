//go:build !darwin || !cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/lilyformac/lily/app/instance"
	"github.com/lilyformac/lily/app/menu"
)

// Without AppKit (Linux, or a darwin build without cgo) the app runs in a console mode for
// development: it supervises the engine like the menu-bar app and prints the menu's status
// lines. LILY_ENGINE names the lily binary; Ctrl-C stops the engine and exits.
func main() {
	if runtime.GOOS == "darwin" {
		fmt.Fprintln(os.Stderr, "Lily: this build has no menu bar (built without cgo); build.sh builds Lily.app with CGO_ENABLED=1. Running in console mode.")
	}
	var a *app
	last := ""
	changed := func() {
		if a == nil {
			return
		}
		m := a.ctrl.Model()
		line := m.Items[0].Title
		if !m.Items[1].Hidden {
			line += " — " + m.Items[1].Title
		}
		if line != last {
			last = line
			fmt.Printf("[%s] %s\n", m.Icon.Name(), line)
		}
	}
	var err error
	a, err = setup(defaultEnvironment(runtime.GOOS), consolePlatform{}, changed)
	if errors.Is(err, instance.ErrRunning) {
		title, text := runningAlert(err)
		fmt.Fprintf(os.Stderr, "Lily: %s. %s\n", title, text)
		os.Exit(1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "Lily:", err)
		os.Exit(1)
	}
	fmt.Printf("logs: %s\nsettings: %s\n", a.paths.Log, a.paths.Settings)
	a.sup.Start()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	done := make(chan struct{})
	a.ctrl.Shutdown(stopTimeout+5*time.Second, func() { close(done) })
	<-done
	a.log.Close()
}

// consolePlatform stands in for AppKit in console mode.
type consolePlatform struct{}

func (consolePlatform) Copy(text string)           { fmt.Println(text) }
func (consolePlatform) Open(path string) error     { fmt.Println("open", path); return nil }
func (consolePlatform) Reveal(path string) error   { fmt.Println("reveal", path); return nil }
func (consolePlatform) LoginItem() menu.LoginState { return menu.LoginUnavailable }
func (consolePlatform) SetLoginItem(bool) error    { return nil }
func (consolePlatform) OpenLoginItemsSettings()    {}
func (consolePlatform) About()                     {}
func (consolePlatform) Terminate()                 {}
func (consolePlatform) Notify(title, body string) {
	fmt.Printf("notification: %s — %s\n", title, body)
}

// Confirm answers yes: console mode is for development, where the download is expected.
func (consolePlatform) Confirm(title, text, ok, cancel string) bool {
	fmt.Printf("%s\n%s\n[%s]\n", title, text, ok)
	return true
}
