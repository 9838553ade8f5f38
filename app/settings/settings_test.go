package settings

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestShippedDefaults keeps resources/default-settings.json and Defaults() equal.
func TestShippedDefaults(t *testing.T) {
	s, err := LoadDefaults(filepath.Join("..", "..", "resources", "default-settings.json"))
	if err != nil {
		t.Fatal(err)
	}
	if s != Defaults() {
		t.Fatalf("default-settings.json = %+v, Defaults() = %+v", s, Defaults())
	}
	if s.Port != 8000 || s.Host != "127.0.0.1" || s.ModelDir != "" || s.LaunchAtLogin {
		t.Fatalf("unexpected defaults %+v", s)
	}
}

func TestLoadMissingGivesDefaults(t *testing.T) {
	s, err := Load(filepath.Join(t.TempDir(), "settings.json"), Defaults())
	if err != nil || s != Defaults() {
		t.Fatalf("%+v, %v", s, err)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "Lily", "settings.json") // the directory is created
	want := Defaults()
	want.Port, want.APIKey, want.LaunchAtLogin, want.ModelDir = 8123, "sk-local", true, "/models/q"
	if err := Save(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, Defaults())
	if err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".settings.json.tmp-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

func TestPartialFileKeepsDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	os.WriteFile(path, []byte(`{"port": 9000, "future_key": [1,2]}`), 0o600)
	s, err := Load(path, Defaults())
	if err != nil || s.Port != 9000 || s.Host != "127.0.0.1" || !s.StartOnLaunch {
		t.Fatalf("%+v, %v", s, err)
	}
}

func TestBrokenFileMovedAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	os.WriteFile(path, []byte(`{"port": 90`), 0o600)
	s, err := Load(path, Defaults())
	if err == nil || s != Defaults() {
		t.Fatalf("%+v, %v", s, err)
	}
	if _, err := os.Stat(path + ".bad"); err != nil {
		t.Fatal("broken file was not kept:", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*Settings)
		want string
	}{
		{func(s *Settings) { s.Port = 0 }, "port 0"},
		{func(s *Settings) { s.Port = 70000 }, "port 70000"},
		{func(s *Settings) { s.Host = "" }, "host is empty"},
		{func(s *Settings) { s.Host = "0.0.0.0" }, "set api_key"},
		{func(s *Settings) { s.Host, s.APIKey = "0.0.0.0", "k" }, ""},
		{func(s *Settings) { s.Host = "::1" }, ""},
		{func(s *Settings) { s.Host = "localhost" }, ""},
	} {
		s := Defaults()
		tc.mut(&s)
		err := s.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", s, err, tc.want)
		}
	}
	if err := Save(filepath.Join(t.TempDir(), "s.json"), Settings{Host: "x", Port: -1}); err == nil {
		t.Fatal("Save accepted an invalid port")
	}
}

// TestConcurrentSaves: readers never see a torn file while writers replace it.
func TestConcurrentSaves(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	if err := Save(path, Defaults()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 25; j++ {
				s := Defaults()
				s.Port = 8000 + i*100 + j
				if err := Save(path, s); err != nil {
					t.Error(err)
					return
				}
			}
		}(i)
	}
	for j := 0; j < 100; j++ {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(data, Defaults()); err != nil {
			t.Fatalf("torn read: %v: %q", err, data)
		}
	}
	wg.Wait()
}
