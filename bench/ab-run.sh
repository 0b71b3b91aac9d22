#!/usr/bin/env bash
# Throughput of two Veil binaries, alternating (docs/reliability.md "What a waiting connection costs"): each
# round starts BEFORE then AFTER on a fresh data dir and drives it with `veil-bench run` for 8 s (4 producers,
# 4 consumers, 256-byte bodies), printing the receive line of each. Only the pairs compare: the machine is
# shared, so compare each round's two lines, not one binary's lines across rounds.
#
#   bench/ab-run.sh BEFORE_BIN AFTER_BIN [kubemq|veil] [ROUNDS]      (defaults: kubemq, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1
after=$2
target=${3:-kubemq}
rounds=${4:-3}
BENCH=${VEIL_BENCH:-target/release/veil-bench}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for round in $(seq "$rounds"); do
  for bin in "$before" "$after"; do
    data=$(mktemp -d)
    sqs=$(free_port) azure=$(free_port) kubemq=$(free_port) admin=$(free_port)
    "$bin" serve --data-dir "$data/d" --sqs-listen "127.0.0.1:$sqs" --azure-listen "127.0.0.1:$azure" \
      --kubemq-listen "127.0.0.1:$kubemq" --admin-listen "127.0.0.1:$admin" --log-level warn 2>"$data/log" &
    pid=$!
    for _ in $(seq 100); do
      (exec 3<>"/dev/tcp/127.0.0.1/$kubemq") 2>/dev/null && break
      sleep 0.1
    done
    if [ "$target" = kubemq ]; then endpoint="http://127.0.0.1:$kubemq"; else endpoint="http://127.0.0.1:$sqs"; fi
    line=$("$BENCH" run --target "$target" --endpoint "$endpoint" --producers 4 --consumers 4 --duration 8 \
      --body-size 256 2>&1 | grep -m1 'receive ' || echo "(no receive line; see $data/log)")
    echo "round $round $bin: $line"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$data"
  done
done
