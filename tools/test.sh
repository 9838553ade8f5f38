#!/usr/bin/env bash
# Runs every test: the Go tests, then the real-client tests (the official openai SDK and curl)
# against a freshly built `lily serve --demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -count=1 ./...
bin="$(mktemp -d)/lily"
go build -o "$bin" ./cmd/lily
(cd tools/clienttest && npm ci --silent --no-audit --no-fund)
LILY_BIN="$bin" node --test tools/clienttest/sdk.test.mjs
