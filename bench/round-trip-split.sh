#!/bin/bash
# Usage: bench/round-trip-split.sh ROUNDS [BIN] (needs target/release/veil-bench, or VEIL_BENCH; ports 9450-9453)
# Where a durable round trip's time goes (issue 28, item 3): the round-trip scenario of `bench/run` (1
# producer, 1 consumer, unbatched, 256 B, lockstep: send, receive once acknowledged, delete) against one
# server, then, from its /metrics over the run, the server's mean time per SQS request by operation (arrival to
# encoded answer) and the mean group commit (log append + fdatasync). Client-side figures are veil-bench's;
# what the server's figures do not cover is the client, the kernel's loopback and hyper's framing outside the
# handler.
ROUNDS=$1; BIN=${2:-target/release/veil}
bench=${VEIL_BENCH:-$(dirname "$0")/../target/release/veil-bench}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
for r in $(seq "$ROUNDS"); do
  rm -rf "$dir/d"
  "$BIN" serve --data-dir "$dir/d" --sqs-listen 127.0.0.1:9450 --azure-listen 127.0.0.1:9451 \
    --kubemq-listen 127.0.0.1:9452 --admin-listen 127.0.0.1:9453 --log-level error & P=$!
  sleep 0.5
  client=$("$bench" run --target veil --endpoint http://127.0.0.1:9450 --producers 1 --consumers 1 --batch 1 \
    --body-size 256 --lockstep --duration 5 2>&1 | grep -E '^ *(end-to-end|send|receive|delete) ' \
    | awk '{printf "%s p50 %s; ", $1, $3}')
  curl -s http://127.0.0.1:9453/metrics > "$dir/metrics"
  server=$(python3 - "$dir/metrics" <<'PY'
import re, sys
sums, counts = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r'(veil_request_duration_seconds|veil_store_commit_duration_seconds)_(sum|count)(\{[^}]*\})? (\S+)', line)
    if not m:
        continue
    name, kind, labels, value = m.groups()
    op = re.search(r'operation="([^"]+)"', labels or '')
    key = op.group(1) if op else 'commit'
    if name == 'veil_request_duration_seconds' and 'protocol="sqs"' not in (labels or ''):
        continue
    (sums if kind == 'sum' else counts)[key] = float(value)
parts = [f"{k} mean {sums[k] / counts[k] * 1e6:.0f} µs (n={counts[k]:.0f})"
         for k in ('SendMessage', 'ReceiveMessage', 'DeleteMessage', 'commit') if counts.get(k)]
print('; '.join(parts))
PY
)
  echo "round $r: client: $client server: $server"
  kill $P; wait $P 2>/dev/null
done
