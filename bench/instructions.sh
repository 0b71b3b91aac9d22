#!/bin/bash
# Usage: bench/instructions.sh [--history on|off] N BIN... (needs valgrind and target/release/veil-bench, or
# VEIL_BENCH; ports 9480-9483)
# Server instructions per message, counted by callgrind rather than timed, so that a change of a few percent is
# readable on a shared machine (issue 28). Each BIN runs under callgrind twice, with N and with 3 × N messages
# sent, received once and deleted (batches of 10, 1 KiB, 2 producers, 2 consumers, one queue whose delivery
# history is set on or off through the admin API); the difference between the two runs, over 2 × N, leaves out
# start-up and idle work. Callgrind counts user space only: the kernel's share (syscalls, fdatasync, page
# faults) is not in these figures. valgrind's CPU has no SHA extensions, so sha2 runs its software rounds
# there (~45% of all instructions) where the real server uses SHA-NI at a small fraction of that: each figure is
# also given without SHA-256's rounds, the fairer one for comparing everything else.
set -uo pipefail
history=on
if [ "${1:-}" = --history ]; then history=$2; shift 2; fi
N=$1; shift
bench=${VEIL_BENCH:-$(dirname "$0")/../target/release/veil-bench}
dir=$(mktemp -d); P=
trap '[ -n "$P" ] && kill $P 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
# One run of BIN under callgrind with MESSAGES: "total-instructions instructions-without-SHA-256-rounds".
one_run() {
  local bin=$1 messages=$2 total sha
  rm -rf "$dir/d" "$dir/out"
  valgrind --tool=callgrind --callgrind-out-file="$dir/out" "$bin" serve --data-dir "$dir/d" \
    --sqs-listen 127.0.0.1:9480 --azure-listen 127.0.0.1:9481 --kubemq-listen 127.0.0.1:9482 \
    --admin-listen 127.0.0.1:9483 --log-level error 2>/dev/null & P=$!
  for _ in $(seq 120); do curl -sf http://127.0.0.1:9483/readyz >/dev/null && break; sleep 0.5; done
  "$bench" run --target veil --endpoint http://127.0.0.1:9480 --queue load --producers 2 --consumers 2 \
    --batch 10 --body-size 1024 --messages 10 --drain-timeout 60 >/dev/null 2>&1
  curl -sf -X PATCH -H 'content-type: application/json' \
    -d "{\"delivery_history\": $([ "$history" = on ] && echo true || echo false)}" \
    http://127.0.0.1:9483/api/v1/queues/default/load >/dev/null || { echo "setting the history failed" >&2; return 1; }
  "$bench" run --target veil --endpoint http://127.0.0.1:9480 --queue load --producers 2 --consumers 2 \
    --batch 10 --body-size 1024 --messages "$messages" --drain-timeout 300 2>&1 | grep -q throughput \
    || { echo "the load run failed" >&2; return 1; }
  kill $P; wait $P 2>/dev/null; P=
  total=$(grep -E '^(summary|totals):' "$dir/out" | head -1 | awk '{print $2}')
  sha=$(callgrind_annotate --auto=no --threshold=100 "$dir/out" 2>/dev/null | grep 'sha2::sha256::compress256' \
    | awk '{gsub(",", "", $1); s += $1} END {printf "%.0f", s}')
  echo "$bin, $messages messages: $total instructions, $sha in SHA-256 rounds" >&2
  echo "$total $((total - sha))"
}
for bin in "$@"; do
  read -r small small_nosha <<<"$(one_run "$bin" "$N")"
  read -r large large_nosha <<<"$(one_run "$bin" $((3 * N)))"
  awk -v bin="$bin" -v h="$history" -v a="$small" -v b="$large" -v c="$small_nosha" -v d="$large_nosha" -v n="$N" \
    'BEGIN { printf "%s (history %s): %.0f instructions per message, %.0f without SHA-256 rounds\n", bin, h, (b - a) / (2 * n), (d - c) / (2 * n) }'
done
