#!/usr/bin/env bash
# One-shot runs of the agent CLIs — Claude Code (Anthropic Messages), Codex (Responses) and
# opencode (chat completions) — started by `lily launch` against `lily serve --demo`, each
# inside its own network namespace that has only loopback, so no traffic can leave the machine,
# and with telemetry, update checks and error reporting switched off.
#
# The demo model's weights are random: its text is noise that never ends its turn. The server
# therefore caps answers at 32 tokens (--max-output-tokens) and each client must read that cap
# from the protocol and say so in its own way — Claude Code's JSON result has api_error
# "max_output_tokens", Codex prints "Incomplete response returned, reason: max_output_tokens",
# opencode exits 0 — while every request the server saw was answered with a 2xx.
#
# Claude Code's prompt holds a PNG (stream-json input). Its answers hit the cap, so it goes on
# with more turns of the same conversation, each sending the image again: the image must be seen
# every time (the tower ran once, the later turns found it in the encoded-image cache, no
# placeholder), and every turn answered.
#
# Then a second Claude Code process resumes a session in which its Read tool returned a PNG
# (read-image-session.mjs writes that transcript: the demo model never calls a tool itself), so
# the request holds an assistant tool_use and a user tool_result whose content is an image block.
# That image is another one: the tower must encode it once more — it was taken out of the tool
# result, not made a placeholder — and the turns after the cap send it again and find it cached.
#
# Run: LILY_BIN=/path/to/lily bash tools/agents/run.sh   (tools/test.sh does this; needs root
# or user namespaces for `unshare --net`).
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")"

if [ "${1:-}" = "--inside" ]; then
  agent=$2 out=$3
  ip link set lo up
  export HOME="$out/home" XDG_CONFIG_HOME="$out/home/.config" XDG_DATA_HOME="$out/home/.local/share"
  mkdir -p "$HOME/.codex" "$out/work"
  "$LILY_BIN" serve --demo --max-output-tokens 32 --port 18190 >"$out/serve.log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
  for _ in $(seq 1 240); do
    curl -sf 127.0.0.1:18190/status | grep -q '"phase":"ready"' && break
    sleep 0.5
  done
  base=http://127.0.0.1:18190
  bin="$PWD/node_modules/.bin"
  cd "$out/work" && git init -q .
  rc=0
  # Through `lily launch`, which points each client at the server with environment variables
  # and arguments alone; the variables here only switch off what would try the network.
  export PATH="$bin:$PATH" DISABLE_AUTOUPDATER=1 DISABLE_FEEDBACK_COMMAND=1 CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1 \
    OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 CODEX_HOME="$HOME/.codex"
  case $agent in
  claude)
    node -e 'import(process.argv[1]).then((m) => {
      const user = (content) => console.log(JSON.stringify({ type: "user", message: { role: "user", content } }));
      user([{ type: "text", text: "What is in this picture?" }, { type: "image", source: { type: "base64", media_type: "image/png", data: m.pngBase64(96, 64, 11) } }]); })' \
      "$(dirname "$self")/../clienttest/lib.mjs" >"$out/turns.jsonl"
    args=(-p --input-format stream-json --output-format stream-json --verbose --max-turns 1) ;;
  codex) args=(exec --skip-git-repo-check -c check_for_update_on_startup=false -c analytics.enabled=false "Say hello") ;;
  opencode) args=(run "Say hello") ;;
  esac
  input=/dev/null
  [ "$agent" != claude ] || input="$out/turns.jsonl"
  timeout 300 "$LILY_BIN" launch "$agent" --url $base -- "${args[@]}" <"$input" >"$out/stdout" 2>"$out/stderr" || rc=$?
  echo "$rc" >"$out/rc"
  if [ "$agent" = claude ]; then
    curl -s $base/metrics | grep '^lily_image' >"$out/images1" || true
    # The session goes where Claude Code put the first run's transcript (a folder named after the
    # working directory), so that --resume finds it. Auto-compaction is off for this run: the first
    # run already sent Claude Code's compaction requests, and here they would triple the requests.
    transcript=$(ls "$HOME"/.claude/projects/*/*.jsonl 2>/dev/null | head -n 1) || true
    if [ -n "$transcript" ]; then
      session=$(node "$(dirname "$self")/read-image-session.mjs" "$(dirname "$self")/../clienttest/lib.mjs" "$out/work" "$(dirname "$transcript")")
      DISABLE_AUTO_COMPACT=1 timeout 300 "$LILY_BIN" launch claude --url $base -- -p --output-format stream-json --verbose \
        --max-turns 1 --resume "$session" "What does the picture show?" </dev/null >"$out/stdout2" 2>"$out/stderr2" || true
    fi
  fi
  curl -s $base/metrics | grep '^lily_requests_total' >"$out/requests" || true
  curl -s $base/metrics | grep '^lily_image' >"$out/images" || true
  exit 0
fi

: "${LILY_BIN:?set LILY_BIN to a built lily binary}"
LILY_BIN=$(realpath "$LILY_BIN")
export LILY_BIN
# Exact versions in package.json; no lock file: npm writes one without the other platforms' binaries,
# which `npm ci` then rejects. The CLIs are native binaries (Codex has a Node launcher).
[ -n "${AGENTS_NO_INSTALL:-}" ] || npm install --silent --no-audit --no-fund --no-package-lock --engine-strict=false
failed=0
for agent in ${AGENTS:-claude codex opencode}; do
  out=$(mktemp -d)
  start=$(date +%s)
  unshare --net bash "$self" --inside "$agent" "$out"
  rc=$(cat "$out/rc")
  why=""
  # Every request answered with a 2xx, and at least one on the agent's endpoint.
  if grep -v 'status="2[0-9][0-9]"' "$out/requests" | grep -q .; then
    why="the server answered an error: $(grep -v 'status="2' "$out/requests" | tr '\n' ' ')"
  fi
  case $agent in
  claude)
    endpoint=/v1/messages
    # images1: after the first run; images: after the resumed one too.
    if ! { grep -qx 'lily_image_encodes_total 1' "$out/images1" && grep -q '^lily_image_cache_hits_total [1-9]' "$out/images1" &&
      grep -qx 'lily_image_placeholders_total 0' "$out/images1"; }; then
      why="${why:-the image was not seen once and then found again: $(tr '\n' ' ' <"$out/images1")}"
    fi
    hits() { sed -n 's/^lily_image_cache_hits_total //p' "$1"; }
    if [ ! -e "$out/stdout2" ]; then
      why="${why:-the first run left no transcript to put the resumed session beside}"
    elif ! { grep -qx 'lily_image_encodes_total 2' "$out/images" && [ "$(hits "$out/images")" -gt "$(hits "$out/images1")" ] 2>/dev/null &&
      grep -qx 'lily_image_placeholders_total 0' "$out/images"; }; then
      why="${why:-the image in the tool result was not seen once and then found again: $(tr '\n' ' ' <"$out/images")}"
    fi
    # Each run ends with one result: its turns ran, and any error is the cap of the server.
    [ -n "$why" ] || why=$(node -e '
      for (const file of process.argv.slice(1)) {
        const lines = require("fs").readFileSync(file, "utf8").trim().split("\n").map((l) => JSON.parse(l));
        const results = lines.filter((r) => r.type === "result");
        const bad = results.find((r) => r.api_error !== "max_output_tokens" && r.is_error);
        if (bad) console.log(file + ": claude reported: " + (bad.api_error || bad.result));
        else if (results.length !== 1 || !(results[0].num_turns >= 1)) console.log(file + ": no turn ran");
      }' "$out/stdout" "$out/stdout2" 2>&1) ;;
  codex)
    endpoint=/v1/responses
    grep -q "Incomplete response returned, reason: max_output_tokens" "$out/stderr" "$out/stdout" || why="${why:-codex did not report the cap of the server (rc $rc)}" ;;
  opencode)
    endpoint=/v1/chat/completions
    [ "$rc" = 0 ] || why="${why:-opencode exited $rc}" ;;
  esac
  grep -q "endpoint=\"$endpoint\",status=\"200\"" "$out/requests" || why="${why:-no 200 on $endpoint}"
  if [ -n "$why" ]; then
    failed=1
    echo "FAIL $agent ($(($(date +%s) - start)) s): $why"
    tail -n 20 "$out"/stderr* "$out"/stdout* "$out/serve.log"
  else
    echo "ok   $agent ($(($(date +%s) - start)) s): $(tr '\n' ' ' <"$out/requests")"
  fi
done
exit $failed
