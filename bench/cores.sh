#!/bin/bash
# Usage: bench/cores.sh ROUNDS [BIN] (needs target/release/veil-bench, or VEIL_BENCH; uses ports 9430-9433)
# The server on 1 core and on 2 (taskset), interleaved, under the throughput load of bench/ab-throughput.sh
# (batches of 10, 1 KiB, 8 producers, 8 consumers, durable; the load generator itself is not pinned): messages
# received per second, the server's CPU time per message, and the engine lock from /metrics over the run —
# the share of the run's wall time it was held, the mean hold, the p99 hold (the bucket bound under which 99%
# of holds fell) and the mean wait. ADR 0012 reads these: a lock held for a share H of the time caps the
# engine at rate / H whatever the number of cores.
ROUNDS=$1; BIN=${2:-target/release/veil}
bench=${VEIL_BENCH:-$(dirname "$0")/../target/release/veil-bench}
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
lock_figures() { curl -s http://127.0.0.1:9433/metrics | grep '^veil_engine_lock_'; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
for r in $(seq "$ROUNDS"); do
  for cpus in 0 0,1; do
    rm -rf "$dir/d"
    taskset -c $cpus "$BIN" serve --data-dir "$dir/d" --sqs-listen 127.0.0.1:9430 --azure-listen 127.0.0.1:9431 \
      --kubemq-listen 127.0.0.1:9432 --admin-listen 127.0.0.1:9433 --log-level error & P=$!
    sleep 0.5
    lock_figures > "$dir/before"; before=$(cpu_ticks $P); start=$(date +%s.%N)
    line=$("$bench" run --target veil --endpoint http://127.0.0.1:9430 --producers 8 --consumers 8 --batch 10 \
      --body-size 1024 --duration 4 2>&1 | grep throughput)
    end=$(date +%s.%N); after=$(cpu_ticks $P); lock_figures > "$dir/after"
    received=$(echo "$line" | sed -E 's/.*received ([0-9]+)\/s.*over ([0-9.]+) s.*/\1 \2/' | awk '{print $1 * $2}')
    us=$(awk -v t=$((after - before)) -v n="$received" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    lock=$(python3 - "$dir/before" "$dir/after" "$start" "$end" <<'PY'
import sys
def read(path):
    values = {}
    for line in open(path):
        name, value = line.rsplit(' ', 1)
        values[name] = float(value)
    return values
before, after = read(sys.argv[1]), read(sys.argv[2])
wall = float(sys.argv[4]) - float(sys.argv[3])
d = lambda k: after.get(k, 0) - before.get(k, 0)
hold_n, hold_s = d('veil_engine_lock_hold_seconds_count'), d('veil_engine_lock_hold_seconds_sum')
wait_s = d('veil_engine_lock_wait_seconds_sum')
buckets = sorted((float(k.split('"')[1]), d(k)) for k in after
                 if k.startswith('veil_engine_lock_hold_seconds_bucket') and '+Inf' not in k)
p99 = next((le for le, n in buckets if n >= 0.99 * hold_n), float('inf'))
print(f"lock held {hold_s / wall * 100:.1f}% of the run, {hold_n / wall:.0f} holds/s, mean hold "
      f"{hold_s / hold_n * 1e6:.2f} µs, p99 hold <= {p99 * 1e6:.0f} µs, mean wait {wait_s / hold_n * 1e6:.2f} µs")
PY
)
    echo "cpus $cpus: $line  cpu ${us} µs/msg  $lock"
    kill $P; wait $P 2>/dev/null
  done
done
