#!/usr/bin/env bash
# Builds Lily.app into bin/.
#
# On macOS: the engine (Go, no cgo) and the menu-bar app (cgo + darwinkit), the bundle
# (Info.plist, icons, default settings), an ad-hoc signature, and with --zip bin/Lily-VERSION.zip.
# On Linux (CI): the darwin/arm64 engine into the bundle, the Info.plist lint, a type-check of
# app/ for darwin (its AppKit code needs cgo, so it cannot be built here), and the bundle checks.
# The app binary itself can only be linked on a Mac.
#
# Usage: bash build.sh [--zip]
set -euo pipefail
cd "$(dirname "$0")"

zip=0
for arg in "$@"; do
  case "$arg" in
    --zip) zip=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
  esac
done
if ! command -v go >/dev/null 2>&1; then
  export PATH="/usr/local/go/bin:$PATH"
fi

out=bin
app="$out/Lily.app"
contents="$app/Contents"
# Info.plist (beside this script) is the bundle's, as is: only the version strings below change.
plist=Info.plist
exe=$(sed -n '/<key>CFBundleExecutable<\/key>/{n;s/.*<string>\(.*\)<\/string>.*/\1/p;}' "$plist")
# The oldest macOS the bundle promises (LSMinimumSystemVersion, 15.0). The app binary is linked
# for it: a cgo link otherwise records the build Mac's own macOS as the minimum (26.0 on a Mac
# running 26), and Macs on 15 could not open Lily. bundlecheck fails a binary that needs more.
min_macos=$(sed -n '/<key>LSMinimumSystemVersion<\/key>/{n;s/.*<string>\(.*\)<\/string>.*/\1/p;}' "$plist")
[ -n "$min_macos" ] || { echo "build.sh: $plist has no LSMinimumSystemVersion" >&2; exit 1; }

# Versions from git: CFBundleShortVersionString is the last vX.Y.Z tag (0.0.0 without one),
# CFBundleVersion the commit count (it only grows), LilyGitDescribe the full description.
describe=$(git describe --tags --always --dirty 2>/dev/null || echo unknown)
short=$( (git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null || true) | sed -n 's/^v\([0-9]*\)\(\.[0-9]*\)\{0,1\}\(\.[0-9]*\)\{0,1\}.*$/\1\2\3/p')
short=${short:-0.0.0}
build=$(git rev-list --count HEAD 2>/dev/null || echo 0)

echo "== Lily.app $short ($build, $describe)"
rm -rf "$app"
mkdir -p "$contents/MacOS" "$contents/Resources"

echo "== engine: darwin/arm64, CGO_ENABLED=0"
CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 go build -trimpath -o "$contents/MacOS/lily" ./cmd/lily

echo "== Info.plist, icons, default settings"
# version KEY VALUE: the sed expression that sets the <string> on the line after <key>KEY</key>.
version() { printf '/<key>%s<\\/key>/{n;s|<string>.*</string>|<string>%s</string>|;}' "$1" "$2"; }
sed -e "$(version CFBundleShortVersionString "$short")" -e "$(version CFBundleVersion "$build")" \
  -e "$(version LilyGitDescribe "$describe")" "$plist" >"$contents/Info.plist"
printf 'APPL????' >"$contents/PkgInfo"
cp resources/AppIcon.icns resources/default-settings.json resources/icons/status-*.png "$contents/Resources/"

lint_plist() {
  if [ "$(uname -s)" = Darwin ]; then
    plutil -lint "$1"
  elif command -v plistutil >/dev/null 2>&1; then
    tmp=$(mktemp)
    plistutil -i "$1" -o "$tmp" -f bin && [ -s "$tmp" ] || { rm -f "$tmp"; echo "$1: plistutil cannot read it" >&2; return 1; }
    rm -f "$tmp"
    echo "$1: OK (plistutil)"
  else
    python3 -c 'import plistlib, sys; plistlib.load(open(sys.argv[1], "rb")); print(sys.argv[1] + ": OK (python3 plistlib)")' "$1"
  fi
}
lint_plist "$contents/Info.plist"

if [ "$(uname -s)" = Darwin ]; then
  echo "== app: darwin/arm64, cgo (darwinkit), for macOS $min_macos and later; -gcflags=all=-N because Go >= 1.25 miscompiles darwinkit v0.5.0 otherwise (darwinkit #286)"
  MACOSX_DEPLOYMENT_TARGET="$min_macos" CGO_ENABLED=1 GOOS=darwin GOARCH=arm64 go build -trimpath -gcflags=all=-N -o "$contents/MacOS/$exe" ./app
  echo "== ad-hoc signature"
  codesign --force --deep -s - "$app"
  codesign --verify --deep --strict "$app"
  go run ./app/bundlecheck -require-app -version "$short" -build "$build" "$app"
  if [ "$zip" = 1 ]; then
    rm -f "$out/Lily-$short.zip"
    ditto -c -k --keepParent "$app" "$out/Lily-$short.zip"
    echo "== $out/Lily-$short.zip"
  fi
else
  echo "== type-check app/ for darwin/arm64 with cgo (no C compiler needed)"
  go run ./tools/typecheck -goos darwin -goarch arm64 ./app/...
  go run ./app/bundlecheck -version "$short" -build "$build" "$app"
  if [ "$zip" = 1 ]; then
    echo "build.sh: --zip needs macOS (ditto, and the app binary)" >&2
  fi
fi
echo "== $app"
