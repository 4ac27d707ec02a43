#!/usr/bin/env bash
# Builds the servers the demo runs (make tools) when they are missing, saying what is being built, how
# long it usually takes, and how long it has taken so far: the first build compiles the Pulumi CLI,
# Gitea and Vault from the Go module proxy. Once built they are reused (`make -q` says so).
set -euo pipefail
cd "$(dirname "$0")/.."
ticker=
# The ticker's sleep would hold the terminal (or a pipe) open after the build: end both.
stop_ticker() { if [ -n "$ticker" ]; then { kill "$ticker"; wait "$ticker"; } 2>/dev/null || true; ticker=; fi; }
trap stop_ticker EXIT
missing=()
for tool in pulumi gitea vault; do
  make -q --no-print-directory "bin/$tool" 2>/dev/null || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0
# Measured on this project's CI machines (2 cores, cold Go caches): Pulumi and Gitea ~8 min together,
# Vault ~10 min. Warm caches make it minutes.
echo "demo: building ${missing[*]/#/bin/} from the Go module proxy, once: usually up to ~18 min on 2 cores the first time (Pulumi and Gitea ~8, Vault ~10); later runs reuse them" >&2
for tool in "${missing[@]}"; do
  start=$SECONDS
  log="bin/.build-$tool.log"
  mkdir -p bin
  echo "demo: building bin/$tool (log: $log)" >&2
  ( trap 'kill $nap 2>/dev/null; exit 0' TERM
    while :; do sleep 30 & nap=$!; wait $nap; echo "demo:   … bin/$tool: $((SECONDS - start))s so far" >&2; done ) &
  ticker=$!
  if ! make --no-print-directory "bin/$tool" >"$log" 2>&1; then
    stop_ticker
    echo "demo: building bin/$tool failed; the end of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  stop_ticker
  echo "demo: bin/$tool built in $((SECONDS - start))s" >&2
done
