#!/usr/bin/env bash
# Overload at 3x capacity (docs/reliability.md "Load and overload"): the same `veil-bench overload` run
# against Veil with its default admission limit and with the limit off (VEIL_MAX_REQUESTS_IN_FLIGHT=0), so
# the two are compared in one invocation. Each run measures capacity (closed loop), offers 3x of it open loop,
# then half of it, and prints latency percentiles, throttled vs timed-out counts and server RSS over time.
#
#   bench/overload.sh [VEIL_BIN] [OUT_DIR]        (defaults: target/release/veil, bench/results)
#
# Extra veil-bench arguments go in OVERLOAD_ARGS (e.g. "--overload-seconds 30 --connections 2048").
# OVERLOAD_PIN=1 runs Veil on CPU 0 and the load generator on CPU 1 (taskset), so that on a 2-core machine the
# generator is not starved by the server it overloads. One core of Veil still serves more than one core of
# generator can offer 3x of, so OVERLOAD_CPU_PERCENT=P (with OVERLOAD_PIN) also caps Veil at P% of its core
# through a cgroup (v1 cpu controller or v2 cpu.max; root): then the generator has the headroom to overload it.
set -euo pipefail
cd "$(dirname "$0")/.."
VEIL_BIN=${1:-target/release/veil}
OUT=${2:-bench/results}
BENCH=${VEIL_BENCH:-target/release/veil-bench}
mkdir -p "$OUT"
# Thousands of client connections on each side; veil-bench raises its own soft limit, this covers the shell.
ulimit -n "$(ulimit -Hn)"
stamp=$(date +%s)
pin=()
if [ -n "${OVERLOAD_PIN:-}" ]; then
  wrapper=$(mktemp)
  trap 'rm -f "$wrapper"' EXIT
  cap=""
  if [ -n "${OVERLOAD_CPU_PERCENT:-}" ]; then
    period_us=100000
    quota_us=$(( OVERLOAD_CPU_PERCENT * period_us / 100 ))
    if [ -d /sys/fs/cgroup/cpu ]; then
      group=/sys/fs/cgroup/cpu/veil-overload
      mkdir -p "$group"
      echo "$quota_us" >"$group/cpu.cfs_quota_us"
      echo "$period_us" >"$group/cpu.cfs_period_us"
    else
      group=/sys/fs/cgroup/veil-overload
      mkdir -p "$group"
      echo "$quota_us $period_us" >"$group/cpu.max"
    fi
    cap="echo \$\$ >$group/cgroup.procs; "
    echo "Veil capped at $OVERLOAD_CPU_PERCENT% of CPU 0 ($group)"
  fi
  printf '#!/bin/sh\n%sexec taskset -c 0 %q "$@"\n' "$cap" "$(realpath "$VEIL_BIN")" >"$wrapper"
  chmod +x "$wrapper"
  VEIL_BIN=$wrapper
  pin=(taskset -c 1)
fi
echo "== admission limit at its default"
"${pin[@]}" "$BENCH" overload --veil-bin "$VEIL_BIN" --json "$OUT/overload-limit-$stamp.json" ${OVERLOAD_ARGS:-}
echo "== admission limit off"
VEIL_MAX_REQUESTS_IN_FLIGHT=0 "${pin[@]}" "$BENCH" overload --veil-bin "$VEIL_BIN" --json "$OUT/overload-nolimit-$stamp.json" ${OVERLOAD_ARGS:-}
