//go:build darwin && cgo

// Package ptr passes darwinkit objects right and wrong.
package ptr

import (
	"github.com/progrium/darwinkit/macos/appkit"
	"github.com/progrium/darwinkit/objc"
)

// Right passes the value.
func Right(m *appkit.Menu, it *appkit.MenuItem) {
	objc.Retain(it)
	m.AddItem(*it)
}

// Wrong passes the pointer, which darwinkit would hand to Objective-C as a raw Go pointer.
func Wrong(m *appkit.Menu, it *appkit.MenuItem) {
	m.AddItem(it)
	objc.Call[objc.Void](m, objc.Sel("addItem:"), it)
}
