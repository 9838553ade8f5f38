package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// template is the repository's Info.plist with the versions stamped as build.sh does (its sed
// expression, run here), so the test also fails if build.sh stops finding the keys.
func template(t *testing.T) []byte {
	t.Helper()
	return stamp(t, "1.2.3", "42", "v1.2.3-0-gabc")
}

// stamp runs build.sh's version function through sed on ../../Info.plist.
func stamp(t *testing.T, short, build, describe string) []byte {
	t.Helper()
	script, err := os.ReadFile(filepath.Join("..", "..", "build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var fn string
	for _, line := range strings.Split(string(script), "\n") {
		if strings.HasPrefix(line, "version() {") {
			fn = line
		}
	}
	if fn == "" {
		t.Fatal("build.sh has no version() function")
	}
	sh := fn + `
sed -e "$(version CFBundleShortVersionString "$1")" -e "$(version CFBundleVersion "$2")" -e "$(version LilyGitDescribe "$3")" ../../Info.plist`
	out, err := exec.Command("bash", "-c", sh, "stamp", short, build, describe).Output()
	if err != nil {
		t.Fatalf("stamping Info.plist: %v", err)
	}
	return out
}

// TestInfoPlist: the repository's Info.plist is the bundle's as it stands (valid, version 0.0.0
// until build.sh stamps it), and build.sh's stamp changes the three version strings only.
func TestInfoPlist(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "Info.plist"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := ParsePlist(raw)
	if err != nil {
		t.Fatal(err)
	}
	if plain["CFBundleShortVersionString"] != "0.0.0" || plain["CFBundleVersion"] != "0" {
		t.Errorf("unstamped versions %v %v, want 0.0.0 and 0", plain["CFBundleShortVersionString"], plain["CFBundleVersion"])
	}
	info, err := ParsePlist(template(t))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"LSUIElement": true, "LSMinimumSystemVersion": "15.0", "CFBundleIdentifier": "com.lilyformac.lily",
		"CFBundleExecutable": "LilyApp", "CFBundleShortVersionString": "1.2.3", "CFBundleVersion": "42", "LilyGitDescribe": "v1.2.3-0-gabc",
		"CFBundlePackageType": "APPL", "CFBundleIconFile": "AppIcon", "NSSupportsSuddenTermination": false,
	} {
		if info[key] != want {
			t.Errorf("%s = %#v, want %#v", key, info[key], want)
		}
	}
	changed := 0
	for key, v := range plain {
		if info[key] != v {
			changed++
		}
	}
	if changed != 3 || len(info) != len(plain) {
		t.Errorf("stamping changed %d of %d keys (%d after), want the 3 version strings", changed, len(plain), len(info))
	}
}

func TestParsePlistRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"unclosed":      `<plist><dict><key>a</key><string>x</string>`,
		"duplicate":     `<plist><dict><key>a</key><true/><key>a</key><false/></dict></plist>`,
		"value missing": `<plist><dict><key>a</key></dict></plist>`,
		"not a dict":    `<plist><array><string>x</string></array></plist>`,
		"bad integer":   `<plist><dict><key>n</key><integer>x</integer></dict></plist>`,
		"unknown":       `<plist><dict><key>a</key><thing/></dict></plist>`,
	} {
		if _, err := ParsePlist([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	v, err := ParsePlist([]byte(`<plist><dict><key>n</key><integer>7</integer><key>l</key><array><real>1.5</real><dict/></array></dict></plist>`))
	if err != nil || v["n"] != int64(7) || len(v["l"].([]any)) != 2 {
		t.Fatalf("%v %v", v, err)
	}
}

// machO writes a minimal 64-bit Mach-O header with the given CPU type, an LC_BUILD_VERSION for
// platform with minos 15.0, and a code signature if signed.
func machO(t *testing.T, path string, cpu uint32, signed bool, platform uint32) {
	t.Helper()
	loads := [][]uint32{buildVersion(platform, 15<<16)}
	if signed {
		loads = append(loads, signature)
	}
	machOLoads(t, path, cpu, loads...)
}

// buildVersion is an LC_BUILD_VERSION load command (no tools) with minimum OS minos and SDK 26.0.
func buildVersion(platform, minos uint32) []uint32 {
	return []uint32{lcBuildVersion, 24, platform, minos, 26 << 16, 0}
}

// versionMinMacOSX is an LC_VERSION_MIN_MACOSX load command with SDK 26.0.
func versionMinMacOSX(version uint32) []uint32 {
	return []uint32{lcVersionMinMacOSX, 16, version, 26 << 16}
}

var signature = []uint32{lcCodeSignature, 16, 4096, 16}

// machOLoads writes a minimal 64-bit executable Mach-O header for cpu with these load commands.
func machOLoads(t *testing.T, path string, cpu uint32, loads ...[]uint32) {
	t.Helper()
	var cmds bytes.Buffer
	for _, l := range loads {
		binary.Write(&cmds, binary.LittleEndian, l)
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, []uint32{0xfeedfacf, cpu, 0, 2 /* MH_EXECUTE */, uint32(len(loads)), uint32(cmds.Len()), 0, 0})
	b.Write(cmds.Bytes())
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
}

const cpuArm64, cpuAmd64 = 0x0100000c, 0x01000007

func TestCheckMachO(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	machO(t, good, cpuArm64, true, platformMacOS)
	if desc, minOS, err := CheckMachO(good); err != nil || !strings.Contains(desc, "arm64") || !strings.Contains(desc, "macOS ≥ 15.0 (LC_BUILD_VERSION)") || minOS != 15<<16 {
		t.Fatalf("%q %#x %v", desc, minOS, err)
	}
	old := filepath.Join(dir, "old-linker")
	machOLoads(t, old, cpuArm64, versionMinMacOSX(10<<16|13<<8|2), signature)
	if desc, minOS, err := CheckMachO(old); err != nil || !strings.Contains(desc, "macOS ≥ 10.13.2 (LC_VERSION_MIN_MACOSX)") || minOS != 10<<16|13<<8|2 {
		t.Fatalf("LC_VERSION_MIN_MACOSX: %q %#x %v", desc, minOS, err)
	}
	for name, mk := range map[string]func(string){
		"amd64":            func(p string) { machO(t, p, cpuAmd64, true, platformMacOS) },
		"unsigned":         func(p string) { machO(t, p, cpuArm64, false, platformMacOS) },
		"iOS":              func(p string) { machO(t, p, cpuArm64, true, 2) },
		"no minimum macOS": func(p string) { machOLoads(t, p, cpuArm64, signature) },
		"ELF":              func(p string) { data, _ := os.ReadFile(os.Args[0]); os.WriteFile(p, data, 0o755) },
		"not executable": func(p string) {
			machO(t, p, cpuArm64, true, platformMacOS)
			os.Chmod(p, 0o644)
		},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		mk(p)
		if _, _, err := CheckMachO(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// bundle lays out a Lily.app like build.sh does, with a stand-in engine.
func bundle(t *testing.T) string {
	t.Helper()
	app := filepath.Join(t.TempDir(), "Lily.app")
	res := filepath.Join(app, "Contents", "Resources")
	os.MkdirAll(filepath.Join(app, "Contents", "MacOS"), 0o755)
	os.MkdirAll(res, 0o755)
	os.WriteFile(filepath.Join(app, "Contents", "Info.plist"), template(t), 0o644)
	machO(t, filepath.Join(app, "Contents", "MacOS", "lily"), cpuArm64, true, platformMacOS)
	files, _ := filepath.Glob(filepath.Join("..", "..", "resources", "icons", "status-*.png"))
	files = append(files, filepath.Join("..", "..", "resources", "AppIcon.icns"), filepath.Join("..", "..", "resources", "default-settings.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(res, filepath.Base(f)), data, 0o644)
	}
	return app
}

func TestCheckBundle(t *testing.T) {
	app := bundle(t)
	report, err := Check(app, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(report, "\n"))
	}
	if err := CheckStamp(app, "1.2.3", "42"); err != nil {
		t.Fatal(err)
	}
	if err := CheckStamp(app, "1.2.4", ""); err == nil || !strings.Contains(err.Error(), `CFBundleShortVersionString = "1.2.3", but build.sh stamped "1.2.4"`) {
		t.Fatalf("a wrong version passed: %v", err)
	}
	if err := CheckStamp(app, "", "43"); err == nil || !strings.Contains(err.Error(), "CFBundleVersion") {
		t.Fatalf("a wrong build number passed: %v", err)
	}
	if _, err := Check(app, true); err == nil || !strings.Contains(err.Error(), "MacOS/LilyApp is missing") {
		t.Fatalf("app binary not required: %v", err)
	}
	machO(t, filepath.Join(app, "Contents", "MacOS", "LilyApp"), cpuArm64, true, platformMacOS)
	if _, err := Check(app, true); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(app, "Contents", "Resources", "status-ready@2x.png"))
	plist := strings.Replace(string(template(t)), "<key>LSUIElement</key>\n\t<true/>", "<key>LSUIElement</key>\n\t<false/>", 1)
	plist = strings.Replace(plist, "<string>15.0</string>", "<string>14.0</string>", 1)
	os.WriteFile(filepath.Join(app, "Contents", "Info.plist"), []byte(plist), 0o644)
	_, err = Check(app, false)
	for _, want := range []string{"status-ready@2x.png is missing", "LSUIElement must be true", `LSMinimumSystemVersion = "14.0"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missed %q: %v", want, err)
		}
	}
}

// TestCheckBundleMinimumMacOS: a binary whose Mach-O minimum is a later macOS than Info.plist's
// LSMinimumSystemVersion (an app linked on macOS 26 without MACOSX_DEPLOYMENT_TARGET) fails the
// bundle, whichever load command records it; one at or below it passes.
func TestCheckBundleMinimumMacOS(t *testing.T) {
	app := bundle(t)
	macos := filepath.Join(app, "Contents", "MacOS")
	for _, tc := range []struct {
		name   string
		engine []uint32
		app    []uint32
		want   string // "" passes
	}{
		{"both 15.0", buildVersion(platformMacOS, 15<<16), buildVersion(platformMacOS, 15<<16), ""},
		{"older minimums", buildVersion(platformMacOS, 12<<16), versionMinMacOSX(11 << 16), ""},
		{"app linked for 26.0", buildVersion(platformMacOS, 12<<16), buildVersion(platformMacOS, 26<<16),
			"MacOS/LilyApp needs macOS 26.0 or later (its Mach-O minimum), but Info.plist's LSMinimumSystemVersion promises 15.0"},
		{"app 15.1 by LC_VERSION_MIN_MACOSX", buildVersion(platformMacOS, 15<<16), versionMinMacOSX(15<<16 | 1<<8),
			"MacOS/LilyApp needs macOS 15.1 or later"},
		{"engine 15.0.1", buildVersion(platformMacOS, 15<<16|1), buildVersion(platformMacOS, 15<<16),
			"MacOS/lily needs macOS 15.0.1 or later"},
	} {
		machOLoads(t, filepath.Join(macos, "lily"), cpuArm64, tc.engine, signature)
		machOLoads(t, filepath.Join(macos, "LilyApp"), cpuArm64, tc.app, signature)
		_, err := Check(app, true)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "MACOSX_DEPLOYMENT_TARGET=15.0")):
			t.Errorf("%s: %v, want an error containing %q and the fix", tc.name, err, tc.want)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for s, want := range map[string]uint32{"15": 15 << 16, "15.0": 15 << 16, "15.4.1": 15<<16 | 4<<8 | 1, "26.0": 26 << 16} {
		if got, ok := parseVersion(s); !ok || got != want || formatVersion(got) == "" {
			t.Errorf("parseVersion(%q) = %#x %v, want %#x", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "15.", "x", "15.256", "1.2.3.4", "-1"} {
		if _, ok := parseVersion(s); ok {
			t.Errorf("parseVersion(%q) accepted", s)
		}
	}
	if got := formatVersion(15<<16 | 4<<8 | 1); got != "15.4.1" {
		t.Errorf("formatVersion = %q", got)
	}
}
