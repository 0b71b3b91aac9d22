#!/bin/bash
# Usage: bench/checkpoint-cpu.sh ROUNDS BIN_A BIN_B ... (needs target/release/veil-bench, or VEIL_BENCH; uses
# ports 9400-9402)
# A/B, interleaved: the throughput scenario of bench/ab-throughput.sh (batches of 10, 1 KiB, 8 producers,
# 8 consumers, durable, 4 s), with the CPU time (user + system) of the store's checkpoint thread and of the
# whole server per received message, read from /proc/PID/task/*/stat. 16 MiB log segments, so that a run of
# a few seconds closes and checkpoints several. Issue 28's target for bodies written once: checkpoint CPU per
# message ≤ a third of what it was (docs/decisions/0013-bodies-written-once.md).
ROUNDS=$1; shift
BENCH="${VEIL_BENCH:-$(dirname "$0")/../target/release/veil-bench}"
ticks() { sed 's/.*) //' "$1" | awk '{print $12 + $13}'; }
thread_ticks() { # PID, thread name prefix
  local total=0
  for task in /proc/$1/task/*; do
    if [[ "$(cat "$task/comm" 2>/dev/null)" == "$2"* ]]; then total=$((total + $(ticks "$task/stat"))); fi
  done
  echo $total
}
hz=$(getconf CLK_TCK)
for r in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    dir=$(mktemp -d)
    $bin serve --data-dir "$dir" --wal-segment-mib 16 --sqs-listen 127.0.0.1:9400 --azure-listen 127.0.0.1:9401 \
      --kubemq-listen 127.0.0.1:9402 --log-level warn & P=$!
    sleep 0.5
    server_before=$(ticks /proc/$P/stat); ckpt_before=$(thread_ticks $P veil-store-chec)
    line=$("$BENCH" run --target veil --endpoint http://127.0.0.1:9400 --producers 8 --consumers 8 --batch 10 \
      --body-size 1024 --duration 4 2>&1 | grep throughput)
    server_after=$(ticks /proc/$P/stat); ckpt_after=$(thread_ticks $P veil-store-chec)
    received=$(echo "$line" | sed -E 's/.*received ([0-9]+)\/s.*over ([0-9.]+) s.*/\1 \2/' | awk '{print $1 * $2}')
    per_msg() { awk -v t="$1" -v n="$received" -v hz="$hz" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }'; }
    echo "$(basename "$bin"): $line  server $(per_msg $((server_after - server_before))) µs/msg" \
      "checkpoint $(per_msg $((ckpt_after - ckpt_before))) µs/msg"
    kill $P; wait $P 2>/dev/null
    rm -rf "$dir"
  done
done
