#!/usr/bin/env bash
# Tokenizer throughput: engine/tokenizer (Go) vs Hugging Face tokenizers (Rust, via
# @anush008/tokenizers), single-threaded, on the same deterministic >= 5 MB corpus in 16 KB
# line-aligned chunks, with the Qwen3 tokenizer.json under both split regexes. Checks that both
# produce identical ids and prints MB/s (best of 3 passes, each with a fresh word cache).
# Usage: tools/refgen/tokbench.sh   (needs node + npm; installs tools/refgen/node_modules)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -d "$here/node_modules/@anush008" ] || (cd "$here" && npm ci --silent)
export RAYON_NUM_THREADS=1 UV_THREADPOOL_SIZE=1
(cd "$here" && node tokbench.mjs corpus "$work")
(cd "$root" && go build -o "$work/tokbench" ./tools/refgen/tokbench)
for re in qwen3 qwen35; do
	(cd "$root" && "$work/tokbench" -dir "$work" -regex "$re")
	(cd "$here" && node tokbench.mjs rust "$work" "$re")
done
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
