#!/bin/bash
# Usage: bench/profile-throughput.sh BIN OUT.data (needs perf and target/release/veil-bench, or VEIL_BENCH;
# uses ports 9410-9413)
# A perf profile (call graphs, 999 Hz, 5 s) of one veil server under the throughput load of
# bench/ab-throughput.sh, then its hottest symbols. docs/benchmarks.md "Static (musl) build against glibc"
# compares two such profiles: `perf report -i OUT.data --no-children --sort symbol -g none`.
set -euo pipefail
bin=$1; out=$2
bench=${VEIL_BENCH:-$(dirname "$0")/../target/release/veil-bench}
data=$(mktemp -d)
"$bin" serve --data-dir "$data" --sqs-listen 127.0.0.1:9410 --azure-listen 127.0.0.1:9411 \
  --kubemq-listen 127.0.0.1:9412 --admin-listen 127.0.0.1:9413 --log-level warn 2>/dev/null & server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$data"' EXIT
sleep 0.5
perf record -F 999 -g -p "$server" -o "$out" -- sleep 5 >/dev/null 2>&1 & recorder=$!
"$bench" run --target veil --endpoint http://127.0.0.1:9410 --producers 8 --consumers 8 --batch 10 \
  --body-size 1024 --duration 4 2>&1 | grep throughput
wait $recorder
perf report -i "$out" --no-children --sort symbol --stdio -g none 2>/dev/null | grep '%' | head -15
