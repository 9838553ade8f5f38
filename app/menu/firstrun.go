package menu

import (
	"fmt"

	"github.com/lilyformac/lily/engine/lifecycle"
)

// The first start of the engine without a model on disk downloads ~19 GB before anything is
// served: Ollama, LM Studio and oMLX all ask before such a download, and so does Lily, once.
// lifecycle.PendingDownload answers without the network, as the engine's pull phase would
// before it lists the Hub, so the question names what is left of an interrupted download.

// Buttons of the download confirmation; the first is the default.
const (
	DownloadOK     = "Download and Start"
	DownloadCancel = "Not Now"
)

// DownloadPrompt is the confirmation shown before the engine would download the model: how much
// (what is left), the free disk, where it goes, and that an interruption loses nothing.
func DownloadPrompt(d lifecycle.Download) (title, text string) {
	title, left := "Download the model to start Lily?", "to download"
	if d.Left < lifecycle.ModelBytes { // an earlier download was interrupted
		title, left = "Finish downloading the model to start Lily?", "left to download"
	}
	text = fmt.Sprintf("Lily runs %s: %s %s, into %s.", DefaultModelID, FormatBytes(d.Left), left, d.Dir)
	switch {
	case d.Free < 0:
	case d.Free < d.Left:
		text += fmt.Sprintf(" Only %s is free on that disk: free up %s first, or the engine stops before downloading.",
			FormatBytes(d.Free), FormatBytes(d.Left-d.Free))
	default:
		text += fmt.Sprintf(" %s is free on that disk.", FormatBytes(d.Free))
	}
	text += " If the download is interrupted (Stop Server, sleep, a lost connection), it resumes where it stopped." +
		" The Mac stays awake while it downloads; the menu shows its progress."
	return title, text
}

// Start starts the engine, first asking (Platform.Confirm) when it would download the model: no
// model_dir set, the download never accepted, and the default model not complete on disk.
// Accepting is saved in the settings, so it is asked once; declining leaves Lily off.
func (c *Controller) Start() {
	if c.confirmDownload() {
		c.Engine.Start()
	}
}

func (c *Controller) confirmDownload() bool {
	c.mu.Lock()
	s := c.settings
	c.mu.Unlock()
	if s.ModelDir != "" || s.DownloadAccepted || c.Pending == nil {
		return true // the engine pulls nothing (--model), or the user agreed before
	}
	d := c.Pending()
	if d.Complete {
		return true
	}
	title, text := DownloadPrompt(d)
	if !c.Platform.Confirm(title, text, DownloadOK, DownloadCancel) {
		c.logf("the model download (%s into %s) was not confirmed; Lily stays off", FormatBytes(d.Left), d.Dir)
		c.note("Lily is off: Start Server offers the %s download again", FormatBytes(d.Left))
		return false
	}
	c.logf("the model download (%s into %s) was confirmed", FormatBytes(d.Left), d.Dir)
	c.mu.Lock()
	c.settings.DownloadAccepted = true
	s = c.settings
	c.mu.Unlock()
	c.save(s)
	return true
}
