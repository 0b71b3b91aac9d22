#!/usr/bin/env bash
# Overload at 3x capacity (docs/reliability.md "Load and overload"): the same `veil-bench overload` run
# against Veil with its default admission limit and with the limit off (VEIL_MAX_REQUESTS_IN_FLIGHT=0), so
# the two are compared in one invocation. Each run measures capacity (closed loop), offers 3x of it open loop,
# then half of it, and prints latency percentiles, throttled vs timed-out counts and server RSS over time.
#
#   bench/overload.sh [VEIL_BIN] [OUT_DIR]        (defaults: target/release/veil, bench/results)
#
# Extra veil-bench arguments go in OVERLOAD_ARGS (e.g. "--overload-seconds 30 --connections 2048").
set -euo pipefail
cd "$(dirname "$0")/.."
VEIL_BIN=${1:-target/release/veil}
OUT=${2:-bench/results}
BENCH=${VEIL_BENCH:-target/release/veil-bench}
mkdir -p "$OUT"
# Thousands of client connections on each side; veil-bench raises its own soft limit, this covers the shell.
ulimit -n "$(ulimit -Hn)"
stamp=$(date +%s)
echo "== admission limit at its default"
"$BENCH" overload --veil-bin "$VEIL_BIN" --json "$OUT/overload-limit-$stamp.json" ${OVERLOAD_ARGS:-}
echo "== admission limit off"
VEIL_MAX_REQUESTS_IN_FLIGHT=0 "$BENCH" overload --veil-bin "$VEIL_BIN" --json "$OUT/overload-nolimit-$stamp.json" ${OVERLOAD_ARGS:-}
