#!/bin/bash
# bench/cluster-backends.sh — how PostgreSQL's CPU spreads over its backends under a Veil cluster (issue 27:
# "with 3 nodes no single PostgreSQL backend above 40% of the database's CPU"). Starts its own PostgreSQL 15
# and NODES Veil nodes with PARTITIONS partitions, waits until the partitions have settled over the nodes,
# runs the throughput workload (12 producers + 12 consumers over 12 queues, batches of 10, 1 KiB bodies,
# 10 s) spread over the nodes' SQS ports, and prints each busy PostgreSQL process's share of all PostgreSQL
# CPU over the run (utime + stime from /proc), busiest first.
# Usage: NODES=3 PARTITIONS=4 bench/cluster-backends.sh   (needs target/release/veil and veil-bench, root)
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${NODES:-3}
PARTITIONS=${PARTITIONS:-4}
T=$(mktemp -d); chmod 711 "$T"
URL=$(scripts/pg-test-server start "$T/pg")
PORT=$(echo "$URL" | sed 's/.*:\([0-9]*\)\/.*/\1/')
PM=$(head -1 "$T/pg/data/postmaster.pid")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  scripts/pg-test-server stop "$T/pg" >/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT
psql() { /usr/lib/postgresql/15/bin/psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -X -A -t -q "$@"; }
endpoints=""
for i in $(seq "$NODES"); do
  target/release/veil serve --store "$URL" --node-id "n$i" --pg-schema spread --partitions "$PARTITIONS" \
    --lease-ttl-ms 2000 --sqs-listen "127.0.0.1:195${i}0" --azure-listen "127.0.0.1:195${i}1" \
    --kubemq-listen "127.0.0.1:195${i}2" --admin-listen "127.0.0.1:195${i}3" --log-level warn \
    >"$T/n$i.log" 2>&1 &
  PIDS+=($!)
  endpoints="${endpoints:+$endpoints,}http://127.0.0.1:195${i}0"
  until curl -sf "http://127.0.0.1:195${i}3/readyz" >/dev/null; do sleep 0.2; done
done
until [ "$(psql -c "SELECT count(DISTINCT node) = LEAST($NODES, count(*)) AND bool_and(expires_at > clock_timestamp())
                    FROM spread.veil_partition" 2>/dev/null)" = t ]; do sleep 0.2; done
sleep 2
snap() { for c in $(ps -o pid= --ppid "$PM"); do echo "$c $(sed 's/.*) //' /proc/$c/stat | awk '{print $12+$13}')"; done | sort; }
snap >"$T/a"
target/release/veil-bench run --target veil --endpoint "$endpoints" --producers 12 --consumers 12 --queues 12 \
  --batch 10 --body-size 1024 --duration 10 --wait 1 --visibility 30 2>&1 | grep throughput
snap >"$T/b"
# Processes started during the run count from zero.
join -a 2 -e 0 -o '0,1.2,2.2' "$T/a" "$T/b" | awk '{print $3-$2, $1}' | sort -rn >"$T/d"
total=$(awk '{s+=$1} END {print s}' "$T/d")
echo "PostgreSQL CPU over the run: $total ticks"
head -8 "$T/d" | while read -r ticks pid; do
  printf '%5.1f%%  %s\n' "$(echo "100 * $ticks / $total" | bc -l)" "$(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | cut -c1-90)"
done
