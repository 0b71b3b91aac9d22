#!/bin/bash
# Usage: bench/round-trip-switches.sh ROUNDS [BIN] (needs target/release/veil-bench, or VEIL_BENCH, and
# redis-server; ports 9460-9464)
# Where a durable round trip's time goes beyond the fsync (issue 28, item 3): the round-trip scenario (1
# producer, 1 consumer, unbatched, 256 B, lockstep) against Veil and against Redis with `appendfsync always`,
# interleaved, each a fresh server. For each it prints the client's end-to-end p50 and, over the run, the
# server's context switches (voluntary + involuntary, every thread, from /proc/PID/task/*/status) and CPU time
# (/proc/PID/stat) per request. Both servers sync once per request; what differs is how many times a
# request's thread sleeps and is woken on its way through the server.
ROUNDS=$1; BIN=${2:-target/release/veil}
bench=${VEIL_BENCH:-$(dirname "$0")/../target/release/veil-bench}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
ticks=$(getconf CLK_TCK)

switches() { # every thread's voluntary + involuntary switches so far
  cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {n += $2} END {print n}'
}
by_thread() { # "name voluntary" per thread name, summed over the threads of that name
  for t in /proc/"$1"/task/*; do
    printf '%s %s\n' "$(cat "$t/comm" 2>/dev/null)" "$(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status" 2>/dev/null)"
  done | awk 'NF == 2 {n[$1] += $2} END {for (k in n) print k, n[k]}' | sort
}
cpu_s() { # user + system seconds so far (fields 14 and 15 of /proc/PID/stat)
  awk -v t="$ticks" '{print ($14 + $15) / t}' /proc/"$1"/stat
}
measure() { # NAME PID TARGET ENDPOINT
  local before_sw before_cpu out requests
  sleep 0.5
  before_sw=$(switches "$2"); before_cpu=$(cpu_s "$2"); by_thread "$2" > "$dir/threads-before"
  out=$("$bench" run --target "$3" --endpoint "$4" --producers 1 --consumers 1 --batch 1 --body-size 256 \
    --lockstep --duration 5 2>&1)
  local after_sw after_cpu
  after_sw=$(switches "$2"); after_cpu=$(cpu_s "$2")
  # Three requests (send, receive, delete) per round trip; n= is the number of round trips.
  requests=$(echo "$out" | grep -E '^ *end-to-end ' | sed -E 's/.*\(n=([0-9]+)\).*/\1/')
  requests=$((requests * 3))
  echo "$out" | grep -E '^ *end-to-end ' | awk -v name="$1" '{printf "%-6s end-to-end p50 %s", name, $3}'
  awk -v s=$((after_sw - before_sw)) -v c="$(echo "$after_cpu - $before_cpu" | bc -l)" -v n="$requests" \
    'BEGIN {printf " · %.2f context switches and %.0f µs of server CPU per request (%d requests)\n", s / n, c * 1e6 / n, n}'
  # Where the sleeps are: voluntary switches per request by thread name (the writer, the runtime's workers).
  by_thread "$2" | join "$dir/threads-before" - | awk -v n="$requests" \
    '{d = $3 - $2; if (d > 0) printf "         %s: %.2f voluntary per request\n", $1, d / n}'
}

for r in $(seq "$ROUNDS"); do
  rm -rf "$dir/veil" "$dir/redis"; mkdir -p "$dir/redis"
  "$BIN" serve --data-dir "$dir/veil" --sqs-listen 127.0.0.1:9460 --azure-listen 127.0.0.1:9461 \
    --kubemq-listen 127.0.0.1:9462 --admin-listen 127.0.0.1:9463 --log-level error & P=$!
  measure veil $P veil http://127.0.0.1:9460
  kill $P; wait $P 2>/dev/null
  redis-server --port 9464 --bind 127.0.0.1 --dir "$dir/redis" --appendonly yes --appendfsync always \
    --save '' --loglevel warning & R=$!
  measure redis $R redis redis://127.0.0.1:9464
  kill $R; wait $R 2>/dev/null
done
