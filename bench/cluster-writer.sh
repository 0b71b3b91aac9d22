#!/bin/bash
# bench/cluster-writer.sh — where PostgreSQL's CPU goes under Veil (docs/benchmarks.md): starts its
# own PostgreSQL 15 and one Veil node on it (SQS on 127.0.0.1:9480-9483), runs the throughput workload for
# 10 s, and prints each PostgreSQL process's CPU ticks over the run, busiest first: the first line is the
# backend of PgStore's writer connection. Needs target/release/veil and veil-bench, root (runuser).

set -e
cd "$(dirname "$0")/.."
T=$(mktemp -d); chmod 711 $T
URL=$(scripts/pg-test-server start $T/pg)
PM=$(head -1 $T/pg/data/postmaster.pid)
target/release/veil serve --store $URL --node-id n1 --pg-schema s1 --lease-ttl-ms 2000 --sqs-listen 127.0.0.1:9480 --azure-listen 127.0.0.1:9481 --kubemq-listen 127.0.0.1:9482 --admin-listen 127.0.0.1:9483 --log-level warn & V=$!
sleep 4
snap() { for c in $(ps -o pid= --ppid $PM); do echo "$c $(sed 's/.*) //' /proc/$c/stat | awk '{print $12+$13}')"; done | sort; }
snap > $T/a
target/release/veil-bench run --target veil --endpoint http://127.0.0.1:9480 --producers 4 --consumers 4 --batch 10 --body-size 1024 --duration 10 --wait 1 2>&1 | grep throughput
snap > $T/b
# Processes started during the run (the store's reader connections open on first use) count from zero.
join -a 2 -e 0 -o '0,1.2,2.2' $T/a $T/b | awk '{print $3-$2, $1}' | sort -rn | head -8 | while read d p; do echo "$d ticks $(tr '\0' ' ' </proc/$p/cmdline)"; done
kill $V; wait $V || true
scripts/pg-test-server stop $T/pg; rm -rf $T
