// Package settings holds the menu-bar app's settings: the defaults shipped in the bundle
// (default-settings.json) and the user's copy in settings.json, which is saved atomically.
package settings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
)

// Settings is what the app remembers between launches.
type Settings struct {
	Host          string `json:"host"`            // address the engine binds (127.0.0.1: this Mac only)
	Port          int    `json:"port"`            // the engine's port
	ModelDir      string `json:"model_dir"`       // checkpoint directory; "" = the engine's default (pulled on first start)
	APIKey        string `json:"api_key"`         // bearer key the engine requires; "" = none (loopback only)
	LaunchAtLogin bool   `json:"launch_at_login"` // mirrors the login item the user chose
	StartOnLaunch bool   `json:"start_on_launch"` // start the engine when the app starts
	// DownloadAccepted: the user agreed to download the model (menu.DownloadPrompt), so starting
	// the engine asks no more.
	DownloadAccepted bool `json:"download_accepted"`
	// IdleUnloadMinutes unloads the model after this many minutes without requests, freeing its
	// memory until the next request (lily serve --idle-unload); 0 = never.
	IdleUnloadMinutes int `json:"idle_unload_minutes"`
}

// Defaults are the built-in settings; resources/default-settings.json holds the same values and a
// test keeps the two equal.
func Defaults() Settings {
	return Settings{Host: "127.0.0.1", Port: 8000, StartOnLaunch: true}
}

// KeyEnv is the environment variable the engine reads its API key from, and the one the
// client setups refer to.
const KeyEnv = "LILY_API_KEY"

// Validate reports settings the engine would refuse.
func (s Settings) Validate() error {
	if s.Host == "" {
		return errors.New("host is empty")
	}
	if s.Port < 1 || s.Port > 65535 {
		return fmt.Errorf("port %d: expected 1..65535", s.Port)
	}
	if !IsLoopback(s.Host) && s.APIKey == "" {
		return fmt.Errorf("host %s exposes Lily beyond this Mac: set api_key too", s.Host)
	}
	if s.IdleUnloadMinutes < 0 {
		return fmt.Errorf("idle_unload_minutes %d: expected 0 (never) or more", s.IdleUnloadMinutes)
	}
	return nil
}

// IsLoopback reports whether host only accepts connections from this machine.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Parse reads settings JSON over base: keys that are absent keep base's values, unknown keys are
// ignored (an older app may read a newer file).
func Parse(data []byte, base Settings) (Settings, error) {
	s := base
	if err := json.Unmarshal(data, &s); err != nil {
		return base, err
	}
	if err := s.Validate(); err != nil {
		return base, err
	}
	return s, nil
}

// LoadDefaults reads the bundle's default-settings.json over the built-in defaults; a missing
// or broken file yields the built-in defaults and the error.
func LoadDefaults(path string) (Settings, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Defaults(), err
	}
	s, err := Parse(data, Defaults())
	if err != nil {
		return Defaults(), fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Load reads the user's settings over defaults. A missing file is not an error. A file that
// cannot be parsed is moved aside (to settings.json.bad) so the next Save does not lose it, and
// defaults are returned with the error.
func Load(path string, defaults Settings) (Settings, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return defaults, nil
	}
	if err != nil {
		return defaults, err
	}
	s, err := Parse(data, defaults)
	if err != nil {
		os.Rename(path, path+".bad")
		return defaults, fmt.Errorf("%s (moved to %s.bad): %w", path, filepath.Base(path), err)
	}
	return s, nil
}

// Save writes s to path atomically: a temporary file in the same directory, fsync, rename, then
// fsync of the directory. The file is private (0600): it may hold the API key.
func Save(path string, s Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	return WriteFileAtomic(path, data, 0o600)
}

// WriteFileAtomic replaces path with data so that readers see the old or the new file, never a
// part of one, even across a crash or power loss.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = bytes.NewReader(data).WriteTo(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		d.Sync() // best effort: some file systems refuse to sync a directory
		d.Close()
	}
	return nil
}
