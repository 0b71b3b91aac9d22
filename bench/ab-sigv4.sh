#!/bin/bash
# Usage: bench/ab-sigv4.sh ROUNDS [BIN] (needs target/release/veil-bench; uses ports 9420-9423)
# What verifying SigV4 costs (docs/benchmarks.md, "SigV4 verification"): one binary, interleaved with
# `--sqs-auth on` (the default) and `--sqs-auth off`; veil-bench signs every request either way, as an SDK
# does. Two scenarios per run: the round trip (1 producer, 1 consumer, unbatched, 256 B, lockstep: one
# request's service time) and the throughput run of bench/ab-throughput.sh (batches of 10, 1 KiB, 8
# producers, 8 consumers, durable) with the server's CPU time per received message.
ROUNDS=$1; BIN=${2:-target/release/veil}
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
dir=$(mktemp -d)
for r in $(seq "$ROUNDS"); do
  for mode in on off; do
    rm -rf "$dir/d"
    $BIN serve --data-dir "$dir/d" --sqs-listen 127.0.0.1:9420 --azure-listen 127.0.0.1:9421 \
      --kubemq-listen 127.0.0.1:9422 --admin-listen 127.0.0.1:9423 --log-level warn --sqs-auth $mode & P=$!
    sleep 0.5
    rt=$(target/release/veil-bench run --target veil --endpoint http://127.0.0.1:9420 --producers 1 \
      --consumers 1 --batch 1 --body-size 256 --lockstep --duration 3 2>&1 | grep -E '^ *(end-to-end|send|receive|delete) ' | awk '{printf "%s p50 %s; ", $1, $3}')
    before=$(cpu_ticks $P)
    out=$(target/release/veil-bench run --target veil --endpoint http://127.0.0.1:9420 --producers 8 \
      --consumers 8 --batch 10 --body-size 1024 --duration 4 2>&1)
    after=$(cpu_ticks $P)
    line=$(echo "$out" | grep throughput)
    received=$(echo "$line" | sed -E 's/.*received ([0-9]+)\/s.*over ([0-9.]+) s.*/\1 \2/' | awk '{print $1 * $2}')
    us=$(awk -v t=$((after - before)) -v n="$received" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    echo "auth $mode: round trip: $rt | $line  cpu ${us} µs/msg"
    kill $P; wait $P 2>/dev/null
  done
done
rm -rf "$dir"
