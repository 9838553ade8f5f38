#!/usr/bin/env bash
# Runs every test: the Go tests, then the real-client tests (the official openai, Anthropic and ollama
# SDKs and curl, then the agent CLIs Claude Code, Codex and opencode)
# against a freshly built `lily serve --demo`.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the tests need besides Go: node/npm/curl (client tests), zsh (the app's setups) and clang 17+ (the Metal emulator;
# Debian 12's default clang 14 lacks _Float16/__bf16). Installed with apt-get when missing.
need=()
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && command -v curl >/dev/null 2>&1 || need+=(nodejs npm curl)
command -v clang++-19 >/dev/null 2>&1 || [ -n "${LILY_CLANG:-}" ] || need+=(clang-19)
# The agent CLIs run in a network namespace (unshare, ip) in a git work tree.
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
command -v git >/dev/null 2>&1 || need+=(git)
# The app's setups are pasted into macOS's stock zsh: app/snippets runs each under `zsh -f -i`.
command -v zsh >/dev/null 2>&1 || need+=(zsh)
if [ "${#need[@]}" -gt 0 ]; then
  echo "== installing ${need[*]}"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq "${need[@]}"
  else sudo apt-get update -qq && sudo apt-get install -y -qq "${need[@]}"; fi
fi
# Packages run in parallel on few cores: the emulated ones can pass the default 10-minute limit.
go test -count=1 -timeout 25m ./...
bin="$(mktemp -d)/lily"
go build -o "$bin" ./cmd/lily
(cd tools/clienttest && npm ci --silent --no-audit --no-fund)
LILY_BIN="$bin" node --test tools/clienttest/*.test.mjs
# The agent CLIs (Claude Code, Codex, opencode), one-shot, each in a network namespace with only loopback.
LILY_BIN="$bin" bash tools/agents/run.sh
