#!/bin/bash
# bench/partition-reload.sh — how long a partition with a large backlog takes to serve again after its owner's
# kill -9 (issue 27's failover cases; docs/benchmarks.md "Partitions"). Starts its own PostgreSQL 15 and two
# Veil nodes with PARTITIONS partitions (lease LEASE_MS), fills one queue with BACKLOG messages (256-byte
# bodies, send only), kills the owner of that queue's partition with SIGKILL, and polls the other node's
# admin API for the queue until it answers with the whole backlog. Prints the seconds from the kill, and the
# node's log line with the partition's load time.
# Usage: BACKLOG=1000000 bench/partition-reload.sh   (needs target/release/veil and veil-bench, root for runuser)
set -euo pipefail
cd "$(dirname "$0")/.."
BACKLOG=${BACKLOG:-1000000}
PARTITIONS=${PARTITIONS:-2}
LEASE_MS=${LEASE_MS:-1000}
QUEUE=reload
T=$(mktemp -d); chmod 711 "$T"
URL=$(scripts/pg-test-server start "$T/pg")
PORT=$(echo "$URL" | sed 's/.*:\([0-9]*\)\/.*/\1/')
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  scripts/pg-test-server stop "$T/pg" >/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT
psql() { /usr/lib/postgresql/15/bin/psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -X -A -t -q "$@"; }
for i in 1 2; do
  target/release/veil serve --store "$URL" --node-id "n$i" --pg-schema reload --partitions "$PARTITIONS" \
    --lease-ttl-ms "$LEASE_MS" --sqs-listen "127.0.0.1:194${i}0" --azure-listen "127.0.0.1:194${i}1" \
    --kubemq-listen "127.0.0.1:194${i}2" --admin-listen "127.0.0.1:194${i}3" --log-level info \
    >"$T/n$i.log" 2>&1 &
  PIDS+=($!)
done
for i in 1 2; do
  until curl -sf "http://127.0.0.1:194${i}3/readyz" >/dev/null; do sleep 0.2; done
done
sleep 2 # the fair share settles
echo "filling $QUEUE with $BACKLOG messages"
target/release/veil-bench run --target veil --endpoint http://127.0.0.1:19410 --queue "$QUEUE" --producers 8 \
  --consumers 0 --batch 10 --body-size 256 --messages "$BACKLOG" --no-drain 2>&1 | grep throughput
owner=$(psql -c "SELECT p.node FROM reload.veil_queue q JOIN reload.veil_partition p USING (partition)
                 WHERE q.name = '$QUEUE'")
case $owner in n1) victim=0 other=2 ;; n2) victim=1 other=1 ;; *) echo "no owner: $owner" >&2; exit 1 ;; esac
# What the queue holds before the kill (the fill's acknowledged sends), as the surviving node reports it.
held=$(curl -sf "http://127.0.0.1:194${other}3/api/v1/queues/default/$QUEUE" | grep -o '"visible":[0-9]*')
echo "before the kill: $held"
echo "killing $owner (pid ${PIDS[$victim]}), the owner of $QUEUE's partition"
start=$(date +%s.%N)
kill -9 "${PIDS[$victim]}"
deadline=$(( $(date +%s) + ${DEADLINE_S:-120} ))
until curl -sf "http://127.0.0.1:194${other}3/api/v1/queues/default/$QUEUE" 2>/dev/null \
      | grep -q "$held"; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "partition-reload: backlog=$BACKLOG not served again within ${DEADLINE_S:-120} s; last answer:" >&2
    curl -s "http://127.0.0.1:194${other}3/api/v1/queues/default/$QUEUE" >&2 || true
    echo "the other node's log:" >&2
    tail -20 "$T/n$other.log" >&2
    exit 1
  fi
  sleep 0.05
done
end=$(date +%s.%N)
python3 -c "print(f'partition-reload: backlog=$BACKLOG lease_ms=$LEASE_MS served_again_s={$end - $start:.2f} ($held)')"
grep -h "partition loaded" "$T/n$other.log" | tail -1 || true
