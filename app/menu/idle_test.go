package menu

import (
	"strings"
	"testing"
	"time"

	"github.com/lilyformac/lily/app/settings"
	"github.com/lilyformac/lily/app/supervisor"
)

// unloaded is a Ready engine that released its model for being idle.
func unloaded(s *supervisor.Snapshot) {
	s.Engine = supervisor.EngineStatus{Phase: "unloaded", Model: "Qwen3.6-35B-A3B-4bit", ContextLength: 121088}
}

// TestUnloadedModelMenu: while the engine has unloaded its idle model the first line says so in
// plain words, the URL stays on the second (it still serves), and Load Model shows and loads it;
// once ready again Load Model hides and the line names the memory held.
func TestUnloadedModelMenu(t *testing.T) {
	c, e, _, _ := newTestController(t)
	e.snap = snap(supervisor.Ready, unloaded)
	m := c.Model()
	if got := item(m, Status).Title; got != "Model unloaded to free memory — loads on the next request" {
		t.Errorf("status %q", got)
	}
	if d := item(m, Detail); d.Title != "http://127.0.0.1:8000/v1" || d.Hidden {
		t.Errorf("detail %+v", d)
	}
	if l := item(m, LoadModel); l.Hidden || !l.Enabled || l.Title != "Load Model" {
		t.Errorf("load item %+v", l)
	}
	if tg := item(m, Toggle); tg.Title != "Stop Server" {
		t.Errorf("toggle %+v", tg)
	}
	c.Click(LoadModel)
	if got := e.took(); got != "load" {
		t.Errorf("Load Model did %q", got)
	}

	e.snap = snap(supervisor.Ready, func(s *supervisor.Snapshot) {
		s.Engine = supervisor.EngineStatus{Phase: "ready", Model: "Qwen3.6-35B-A3B-4bit", ContextLength: 121088, MemoryBytes: 21_300_000_000}
	})
	m = c.Model()
	if l := item(m, LoadModel); !l.Hidden {
		t.Errorf("load item shown while loaded: %+v", l)
	}
	if got := item(m, Status).Title; got != "Ready · Qwen3.6-35B-A3B-4bit · 121K context · 21.3 GB" {
		t.Errorf("status %q", got)
	}
	c.Click(LoadModel)
	if got := e.took(); got != "" {
		t.Errorf("Load Model on a loaded model did %q", got)
	}
}

// TestStopAndQuitDiffer: Stop Server stops the engine and keeps Lily (it then offers Start
// Server); Quit Lily stops the engine and quits the app. Titles and tooltips say which.
func TestStopAndQuitDiffer(t *testing.T) {
	c, e, p, _ := newTestController(t)
	e.snap = snap(supervisor.Ready, nil)
	m := c.Model()
	stop, quit := item(m, Toggle), item(m, Quit)
	if stop.Title != "Stop Server" || quit.Title != "Quit Lily" || stop.Title == quit.Title {
		t.Fatalf("titles %q and %q", stop.Title, quit.Title)
	}
	if !strings.Contains(stop.Tooltip, "stays in the menu bar") || !strings.Contains(quit.Tooltip, "quits Lily") {
		t.Errorf("tooltips %q and %q", stop.Tooltip, quit.Tooltip)
	}
	c.Click(Toggle)
	if got := e.took(); got != "stop" || p.terminated != 0 {
		t.Fatalf("Stop Server did %q, terminated %d", got, p.terminated)
	}
	e.snap = snap(supervisor.Stopped, nil)
	if st := item(c.Model(), Toggle); st.Title != "Start Server" || !st.Enabled || !strings.Contains(st.Tooltip, "Starts the engine") {
		t.Errorf("after the stop: %+v", st)
	}
	c.Click(Quit)
	if p.terminated != 1 {
		t.Fatalf("Quit Lily terminated %d times", p.terminated)
	}
}

// TestUnloadWhenIdleSetting: the submenu offers Never, 15 minutes and 1 hour with the setting
// checked; a choice is saved, becomes the engine's --idle-unload, and restarts an idle engine to
// apply it (a busy one takes it at its next start).
func TestUnloadWhenIdleSetting(t *testing.T) {
	c, e, _, _ := newTestController(t)
	m := c.Model()
	var titles []string
	for _, it := range m.IdleChoices {
		titles = append(titles, it.Title)
	}
	if got := strings.Join(titles, "|"); got != "Never|After 15 Minutes|After 1 Hour" || !m.IdleChoices[0].Checked || m.IdleChoices[1].Checked {
		t.Fatalf("choices %q %+v", got, m.IdleChoices)
	}
	if u := item(m, UnloadWhenIdle); u.Title != "Unload When Idle" || !u.Enabled {
		t.Fatalf("item %+v", u)
	}

	e.snap = snap(supervisor.Ready, nil)
	c.ClickIdle(1)
	if got := e.took(); got != "options,restart" || e.opts.IdleUnload != 15*time.Minute {
		t.Fatalf("did %q with %+v", got, e.opts)
	}
	if !strings.Contains(strings.Join(e.opts.Args(), " "), "--idle-unload 15m0s") {
		t.Errorf("args %v", e.opts.Args())
	}
	saved, err := settings.Load(c.SettingsPath, settings.Defaults())
	if err != nil || saved.IdleUnloadMinutes != 15 {
		t.Fatalf("saved %+v, %v", saved, err)
	}
	if m := c.Model(); !m.IdleChoices[1].Checked || m.IdleChoices[0].Checked {
		t.Errorf("checks %+v", m.IdleChoices)
	}

	e.snap = snap(supervisor.Ready, func(s *supervisor.Snapshot) { s.Engine.QueueDepth = 1 })
	c.ClickIdle(2)
	if got := e.took(); got != "options" || e.opts.IdleUnload != time.Hour {
		t.Fatalf("busy engine: did %q with %+v", got, e.opts)
	}
	e.snap = snap(supervisor.Stopped, nil)
	c.ClickIdle(0)
	if got := e.took(); got != "options" || e.opts.IdleUnload != 0 || strings.Contains(strings.Join(e.opts.Args(), " "), "idle") {
		t.Fatalf("stopped engine: did %q with %+v", got, e.opts)
	}
}

// TestReloadNotifiesNothing: the model loading again after an idle unload is no news (a request
// or Load Model asked for it); a failed reload is.
func TestReloadNotifiesNothing(t *testing.T) {
	c, _, p, _ := newTestController(t)
	ready := snap(supervisor.Ready, func(s *supervisor.Snapshot) { s.Engine.Phase = "ready" })
	loading := snap(supervisor.Loading, func(s *supervisor.Snapshot) { s.Engine.Phase = "load" })
	for _, s := range []supervisor.Snapshot{loading, ready, snap(supervisor.Ready, unloaded), loading, ready} {
		c.Observe(s)
	}
	if len(p.notified) != 1 {
		t.Fatalf("notified %q: only the first ready is news", p.notified)
	}
	failed := snap(supervisor.EngineError, func(s *supervisor.Snapshot) { s.Engine.Phase, s.Message = "error", "load: the weights are gone" })
	for _, s := range []supervisor.Snapshot{snap(supervisor.Ready, unloaded), loading, failed} {
		c.Observe(s)
	}
	if len(p.notified) != 2 || !strings.Contains(p.notified[1], "the weights are gone") {
		t.Fatalf("notified %q: a failed reload is news", p.notified)
	}
}
