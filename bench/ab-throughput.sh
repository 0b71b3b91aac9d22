#!/bin/bash
# Usage: bench/ab-throughput.sh ROUNDS BIN_A BIN_B ... (needs target/release/veil-bench; uses port 9400)
# A/B: end-to-end throughput (batches of 10, 1 KiB, 8 producers, 8 consumers, durable), interleaved.
ROUNDS=$1; shift
for r in $(seq $ROUNDS); do
  for bin in "$@"; do
    rm -rf /tmp/perf/d-ab; $bin serve --data-dir /tmp/perf/d-ab --sqs-listen 127.0.0.1:9400 --log-level warn & P=$!
    sleep 0.5
    line=$(/work/main/target/release/veil-bench run --target veil --endpoint http://127.0.0.1:9400 --producers 8 --consumers 8 --batch 10 --body-size 1024 --duration 4 2>&1 | grep throughput)
    echo "$(basename $bin): $line"
    kill $P; wait $P 2>/dev/null
  done
done
