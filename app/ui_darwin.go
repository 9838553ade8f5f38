//go:build darwin && cgo

package main

import (
	"path/filepath"

	"github.com/progrium/darwinkit/macos/appkit"
	"github.com/progrium/darwinkit/macos/foundation"
	"github.com/progrium/darwinkit/objc"

	"github.com/lilyformac/lily/app/menu"
)

// statusUI mirrors menu.Model onto the status item and its NSMenu. Every method runs on the
// main thread. The items are created once (the model's layout never changes) and retained for
// as long as statusUI lives, which is the app's lifetime.
type statusUI struct {
	ctrl     *menu.Controller
	item     *appkit.StatusItem
	menu     *appkit.Menu
	items    []*appkit.MenuItem // parallel to Model.Items
	sub      *appkit.Menu
	subItems []*appkit.MenuItem // parallel to Model.Snippets
	idle     *appkit.Menu
	idleIts  []*appkit.MenuItem // parallel to Model.IdleChoices
	delegate *appkit.MenuDelegate
	icons    map[menu.Icon]*appkit.Image
	shown    menu.Icon
}

// retained takes ownership of an (autoreleased) object: objc.Retain retains it and sets a
// finalizer on the returned pointer that releases it, so the object lives exactly as long as
// the pointer is reachable. Copies of the value do not count, hence the pointer.
func retained[T any, P interface {
	*T
	objc.IObject
}](v T) P {
	p := P(&v)
	objc.Retain(p)
	return p
}

// statusPoints is the template images' size in points.
const statusPoints = 18

func newStatusUI(ctrl *menu.Controller, resources string) *statusUI {
	u := &statusUI{ctrl: ctrl, icons: map[menu.Icon]*appkit.Image{}, shown: -1}
	u.item = retained(appkit.StatusBar_SystemStatusBar().StatusItemWithLength(appkit.VariableStatusItemLength))
	u.item.SetAutosaveName("lily-status-item") // a stable identity across launches (macOS 26 otherwise shows "Item-0")
	for _, ic := range []menu.Icon{menu.IconOff, menu.IconWorking, menu.IconReady, menu.IconError} {
		if img, ok := loadTemplate(resources, "status-"+ic.Name(), ic.Description()); ok {
			u.icons[ic] = img
		}
	}

	m := ctrl.Model()
	u.menu = retained(appkit.NewMenuWithTitle("Lily"))
	u.menu.SetAutoenablesItems(false) // the model decides what is enabled
	for _, it := range m.Items {
		var mi *appkit.MenuItem
		if it.ID == menu.Separator {
			mi = retained(appkit.MenuItem_SeparatorItem())
		} else {
			id := it.ID
			mi = retained(appkit.NewMenuItemWithAction(it.Title, it.Key, func(objc.Object) { ctrl.Click(id) }))
		}
		u.menu.AddItem(*mi) // values, not pointers: darwinkit would send a *T as a raw Go pointer
		u.items = append(u.items, mi)
		switch it.ID {
		case menu.UseWith:
			u.sub, u.subItems = submenu(mi, it.Title, m.Snippets, ctrl.ClickSnippet)
		case menu.UnloadWhenIdle:
			u.idle, u.idleIts = submenu(mi, it.Title, m.IdleChoices, ctrl.ClickIdle)
		}
	}
	// Redraw as the menu opens, so expired notices and the latest numbers show; while it is open
	// the supervisor reads /status often (and once at once), when closed and Ready seldom.
	u.delegate = &appkit.MenuDelegate{}
	u.delegate.SetMenuWillOpen(func(appkit.Menu) {
		ctrl.MenuOpen(true)
		u.render()
	})
	u.delegate.SetMenuDidClose(func(appkit.Menu) { ctrl.MenuOpen(false) })
	u.menu.SetDelegate(u.delegate)
	u.item.SetMenu(*u.menu)
	u.render()
	return u
}

// submenu hangs a menu of items under mi; a click on the i-th calls click(i).
func submenu(mi *appkit.MenuItem, title string, items []menu.Item, click func(int)) (*appkit.Menu, []*appkit.MenuItem) {
	sub := retained(appkit.NewMenuWithTitle(title))
	sub.SetAutoenablesItems(false)
	var mis []*appkit.MenuItem
	for i, it := range items {
		smi := retained(appkit.NewMenuItemWithAction(it.Title, "", func(objc.Object) { click(i) }))
		sub.AddItem(*smi)
		mis = append(mis, smi)
	}
	mi.SetSubmenu(*sub)
	return sub, mis
}

// loadTemplate builds an 18×18 pt template image from name.png and name@2x.png; description is
// what VoiceOver says for it.
func loadTemplate(dir, name, description string) (*appkit.Image, bool) {
	size := foundation.Size{Width: statusPoints, Height: statusPoints}
	img := appkit.NewImageWithSize(size)
	reps := 0
	for _, file := range []string{name + ".png", name + "@2x.png"} {
		rep := appkit.ImageRep_ImageRepWithContentsOfFile(filepath.Join(dir, file))
		if rep.IsNil() {
			continue
		}
		rep.SetSize(size)
		img.AddRepresentation(rep)
		reps++
	}
	if reps == 0 {
		return nil, false
	}
	img.SetTemplate(true) // AppKit tints it for light, dark and highlighted menu bars
	img.SetAccessibilityDescription(description)
	return retained(img), true
}

// render applies the controller's current model.
func (u *statusUI) render() {
	m := u.ctrl.Model()
	button := u.item.Button()
	img, hasIcon := u.icons[m.Icon]
	if m.Icon != u.shown {
		if hasIcon {
			button.SetImage(*img)
		} else {
			button.SetTitle("Lily") // no icons found (a bare binary outside Lily.app)
		}
		u.shown = m.Icon
	}
	if hasIcon && img.AccessibilityDescription() != m.Description {
		img.SetAccessibilityDescription(m.Description) // VoiceOver says the state: "Lily: Ready · …"
	}
	button.SetToolTip(m.Tooltip)
	for i, it := range m.Items {
		if it.ID == menu.Separator || i >= len(u.items) {
			continue
		}
		applyItem(u.items[i], it)
	}
	applyItems(u.subItems, m.Snippets)
	applyItems(u.idleIts, m.IdleChoices)
}

// applyItems applies a submenu's items (parallel to mis).
func applyItems(mis []*appkit.MenuItem, items []menu.Item) {
	for i, it := range items {
		if i < len(mis) {
			applyItem(mis[i], it)
		}
	}
}

func applyItem(mi *appkit.MenuItem, it menu.Item) {
	mi.SetTitle(it.Title)
	mi.SetToolTip(it.Tooltip)
	mi.SetEnabled(it.Enabled)
	mi.SetHidden(it.Hidden)
	state := appkit.ControlStateValueOff
	if it.Checked {
		state = appkit.ControlStateValueOn
	}
	mi.SetState(state)
}

// reopen answers a second launch of Lily.app: it opens the status item's menu where the icon can
// be seen, and otherwise (hidden behind the notch or by a menu-bar manager, where a click would
// open nothing) shows the menu's status in an alert.
func (u *statusUI) reopen(nsapp appkit.Application) {
	button := u.item.Button()
	w := button.Window()
	if u.item.IsVisible() && !w.IsNil() && w.OcclusionState()&appkit.WindowOcclusionStateVisible != 0 {
		button.PerformClick(nil)
		return
	}
	title, text := reopenAlert(u.ctrl.Model(), u.ctrl.Engine.Snapshot().BaseURL())
	nsapp.ActivateIgnoringOtherApps(true)
	showAlert(title, text, "OK")
}
