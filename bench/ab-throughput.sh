#!/bin/bash
# Usage: bench/ab-throughput.sh ROUNDS BIN_A BIN_B ... (needs target/release/veil-bench, or VEIL_BENCH; uses ports 9400-9402)
# A/B: end-to-end throughput (batches of 10, 1 KiB, 8 producers, 8 consumers, durable), interleaved, with the
# server's CPU time per received message (user + system, from /proc/PID/stat), which depends much less than
# the rate on what else the 2 shared cores are doing.
ROUNDS=$1; shift
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
for r in $(seq $ROUNDS); do
  for bin in "$@"; do
    rm -rf /tmp/perf/d-ab; $bin serve --data-dir /tmp/perf/d-ab --sqs-listen 127.0.0.1:9400 --azure-listen 127.0.0.1:9401 --kubemq-listen 127.0.0.1:9402 --log-level warn & P=$!
    sleep 0.5
    before=$(cpu_ticks $P)
    line=$("${VEIL_BENCH:-$(dirname "$0")/../target/release/veil-bench}" run --target veil --endpoint http://127.0.0.1:9400 --producers 8 --consumers 8 --batch 10 --body-size 1024 --duration 4 2>&1 | grep throughput)
    after=$(cpu_ticks $P)
    received=$(echo "$line" | sed -E 's/.*received ([0-9]+)\/s.*over ([0-9.]+) s.*/\1 \2/' | awk '{print $1 * $2}')
    us=$(awk -v t=$((after - before)) -v n="$received" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    echo "$(basename $bin): $line  cpu ${us} µs/msg"
    kill $P; wait $P 2>/dev/null
  done
done
