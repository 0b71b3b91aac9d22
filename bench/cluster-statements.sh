#!/bin/bash
# bench/cluster-statements.sh — which statements PostgreSQL runs under one Veil node, and how often
# (docs/benchmarks.md "Partitions"): starts its own PostgreSQL 15 with pg_stat_statements (track = all) and one
# Veil node on it with PARTITIONS partitions (SQS on 127.0.0.1:9480-9483), runs the throughput workload (12
# producers + 12 consumers over 12 queues, batches of 10, 1 KiB bodies, 10 s), and prints the most frequent
# statements: calls, total execution ms, rows, the statement's start. Transactions per message are the BEGIN
# count over the messages received.
# Usage: PARTITIONS=4 bench/cluster-statements.sh   (needs target/release/veil and veil-bench, root for runuser)
set -euo pipefail
cd "$(dirname "$0")/.."
PARTITIONS=${PARTITIONS:-4}
T=$(mktemp -d); chmod 711 "$T"
URL=$(PG_SERVER_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all" \
  scripts/pg-test-server start "$T/pg")
PORT=$(echo "$URL" | sed 's/.*:\([0-9]*\)\/.*/\1/')
cleanup() {
  [ -n "${V:-}" ] && kill "$V" 2>/dev/null && wait "$V" 2>/dev/null
  scripts/pg-test-server stop "$T/pg" >/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT
psql() { /usr/lib/postgresql/15/bin/psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -X -A -t -q "$@"; }
psql -c "CREATE EXTENSION pg_stat_statements"
target/release/veil serve --store "$URL" --node-id n1 --pg-schema s1 --partitions "$PARTITIONS" --lease-ttl-ms 2000 \
  --sqs-listen 127.0.0.1:9480 --azure-listen 127.0.0.1:9481 --kubemq-listen 127.0.0.1:9482 \
  --admin-listen 127.0.0.1:9483 --log-level warn &
V=$!
sleep 4
psql -c "SELECT pg_stat_statements_reset()" >/dev/null
target/release/veil-bench run --target veil --endpoint http://127.0.0.1:9480 --producers 12 --consumers 12 \
  --queues 12 --batch 10 --body-size 1024 --duration 10 --wait 1 --visibility 30 2>&1 | grep throughput
kill "$V"; wait "$V" || true; V=
psql -F ' | ' -c "SELECT calls, round(total_exec_time)::int AS ms, rows,
  left(regexp_replace(query, '\s+', ' ', 'g'), 110) FROM pg_stat_statements ORDER BY calls DESC LIMIT 14"
