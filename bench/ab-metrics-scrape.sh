#!/bin/bash
# Usage: bench/ab-metrics-scrape.sh ROUNDS [BIN] (needs target/release/veil-bench; uses ports 9410-9413)
# What being scraped costs: the end-to-end throughput run of bench/ab-throughput.sh (batches of 10, 1 KiB,
# 8 producers, 8 consumers, durable) against one server, interleaved without and with veil-bench scraping
# the admin endpoint's /metrics every 100 ms (one kept-alive connection, as Prometheus does), with the
# server's CPU time per received message. Prints one line per run; compare the medians of the two kinds.
ROUNDS=$1; BIN=${2:-target/release/veil}
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
dir=$(mktemp -d)
for r in $(seq "$ROUNDS"); do
  for mode in plain scraped; do
    rm -rf "$dir/d"
    $BIN serve --data-dir "$dir/d" --sqs-listen 127.0.0.1:9410 --azure-listen 127.0.0.1:9411 \
      --kubemq-listen 127.0.0.1:9412 --admin-listen 127.0.0.1:9413 --log-level warn & P=$!
    sleep 0.5
    scrape=()
    [ "$mode" = scraped ] && scrape=(--scrape http://127.0.0.1:9413/metrics --scrape-interval-ms 100)
    before=$(cpu_ticks $P)
    out=$(target/release/veil-bench run --target veil --endpoint http://127.0.0.1:9410 --producers 8 \
      --consumers 8 --batch 10 --body-size 1024 --duration 4 "${scrape[@]}" 2>&1)
    after=$(cpu_ticks $P)
    line=$(echo "$out" | grep throughput)
    received=$(echo "$line" | sed -E 's/.*received ([0-9]+)\/s.*over ([0-9.]+) s.*/\1 \2/' | awk '{print $1 * $2}')
    us=$(awk -v t=$((after - before)) -v n="$received" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    echo "$mode: $line  cpu ${us} µs/msg  $(echo "$out" | grep '^scrape' || true)"
    kill $P; wait $P 2>/dev/null
  done
done
rm -rf "$dir"
