#!/bin/bash
# bench/cluster.sh — the scale-out benchmarks (docs/benchmarks.md, "Scale-out over PostgreSQL").
#
# Starts its own PostgreSQL 15 (scripts/pg-test-server: a temp dir, a free port, stopped on exit), then runs
# veil-bench's throughput workload (batches of 10, 1 KiB bodies, CLIENTS producers and as many consumers spread
# over QUEUES queues, DURATION s, 1 s long polls, deletes on, drained) against, interleaved over RUNS rounds:
#   veil embedded      Veil on its embedded store (one process, one data dir)
#   veil pg 1 node     Veil on PostgreSQL, one node (it decodes and runs every call on its own engine)
#   veil pg 2 nodes    two nodes, the clients spread round-robin over their SQS ports (a follower sends its calls to the leader over the internal RPC)
#   veil pg 3 nodes    three nodes, likewise
#   veil pg-2shards    two nodes whose partitions are spread over two PostgreSQL instances (--pg-shard): a second
#                      server is started for it, and its CPU and counters are added to the first's in every row
#   pg-skip-locked     a plain SQL queue (FOR UPDATE SKIP LOCKED) driven directly by veil-bench
# Each Veil-on-PostgreSQL configuration gets a fresh schema (--pg-schema) in every round. Recorded per run:
# msg/s end to end, server CPU per message (veil processes and PostgreSQL processes separately, utime + stime
# from /proc), WAL fsyncs and WAL bytes per message (pg_stat_wal after pg_stat_reset_shared('wal')),
# transactions per message (pg_stat_database.xact_commit) and statements per message (pg_stat_statements with
# track = all: statements inside functions and the foreign-key checks' queries count too).
# At the end, one line per configuration for scripts (medians over the rounds; lost and duplicated summed):
#   cluster: config=<name> nodes=<N> queues=<K> msg_per_s=<X> lost=<L> duplicated=<D> pg_statements_per_msg=<S> pg_cpu_us_per_msg=<C>
#
# Usage: bench/cluster.sh   (RUNS=3 DURATION=10 QUEUES=12 CLIENTS=12; ONLY="embedded pg1 pg2 pg3 pg2shards skiplocked")
#        VEIL_BASELINE=/path/to/other/veil ONLY="pg1 pg1base skiplocked" bench/cluster.sh   (an A/B of the store)
#        VEIL_BASELINE_ARGS="--pg-writers 1" ONLY="pg1 pg1base skiplocked" bench/cluster.sh  (an A/B of a setting:
#        the baseline node is VEIL_BASELINE, or this veil, started with these extra arguments)
# Needs: target/release/veil and target/release/veil-bench (cargo build --release --bin veil --bin veil-bench),
# PostgreSQL 15 in /usr/lib/postgresql/15/bin, python3, curl, root (for runuser). Results: bench/results/cluster-*.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
DURATION=${DURATION:-10}
QUEUES=${QUEUES:-12}
CLIENTS=${CLIENTS:-12}
ONLY=${ONLY:-"embedded pg1 pg2 pg3 pg2shards skiplocked"}
VEIL=${VEIL:-$PWD/target/release/veil}
BENCH=${BENCH:-$PWD/target/release/veil-bench}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
OUT=${OUT:-bench/results}
STAMP=$(date +%s)
RESULTS="$OUT/cluster-$STAMP.jsonl"
mkdir -p "$OUT"
for bin in "$VEIL" "$BENCH" "$PGBIN/initdb" "$PGBIN/pg_ctl" "$PGBIN/psql"; do
  [ -x "$bin" ] || { echo "cluster.sh: $bin is missing" >&2; exit 1; }
done

# Scratch space of this run (node logs, PostgreSQL's directory), removed on exit unless KEEP_DATA is set.
TMP=$(mktemp -d)
chmod 711 "$TMP" # PostgreSQL runs as the postgres user and must reach its directory inside
PG_DIR="$TMP/pg"
PG2_DIR="$TMP/pg2"
NODE_PIDS=()
wanted() { [[ " $ONLY " == *" $1 "* ]]; }


stop_nodes() {
  local pid
  for pid in "${NODE_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${NODE_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  NODE_PIDS=()
}

cleanup() {
  stop_nodes
  scripts/pg-test-server stop "$PG_DIR" >/dev/null 2>&1 || true
  scripts/pg-test-server stop "$PG2_DIR" >/dev/null 2>&1 || true
  if [ -z "${KEEP_DATA:-}" ]; then rm -rf "$TMP"; else echo "kept $TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- PostgreSQL 15, defaults except what the measurement needs (pg_stat_statements; trust auth on loopback);
# a second instance for pg2shards. PG_PORTS and PG_PIDS list every instance; the counters and CPU add them up.
start_pg() {
  PG_SERVER_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all" \
    scripts/pg-test-server start "$1"
}
psql_on() { PGOPTIONS='-c client_min_messages=warning' "$PGBIN/psql" -X -q -t -A -h 127.0.0.1 -p "$1" -U postgres -d postgres -c "$2"; }
PGURL=$(start_pg "$PG_DIR")
PGPORT=$(cat "$PG_DIR/port")
PGDATA_DIR="$PG_DIR/data"
PG_PID=$(head -1 "$PGDATA_DIR/postmaster.pid")
PG_PORTS=("$PGPORT")
PG_PIDS=("$PG_PID")
if wanted pg2shards; then
  PG2URL=$(start_pg "$PG2_DIR")
  PG_PORTS+=("$(cat "$PG2_DIR/port")")
  PG_PIDS+=("$(head -1 "$PG2_DIR/data/postmaster.pid")")
fi
psql_q() { psql_on "$PGPORT" "$1"; }
for port in "${PG_PORTS[@]}"; do psql_on "$port" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null; done
echo "postgres $("$PGBIN/postgres" --version | awk '{print $3}') up on 127.0.0.1:$PGPORT (pid $PG_PID), data in $PGDATA_DIR"
echo "synchronous_commit=$(psql_q 'SHOW synchronous_commit') fsync=$(psql_q 'SHOW fsync') wal_sync_method=$(psql_q 'SHOW wal_sync_method') shared_buffers=$(psql_q 'SHOW shared_buffers')"

# utime + stime of a process, in clock ticks (fields 14 and 15 of /proc/PID/stat, counted after the ')').
ticks_of() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0; }
# PostgreSQL's CPU so far: the postmaster, every live child (backends, walwriter, checkpointer, ...) and the
# children it has reaped (cutime + cstime: backends of closed connections).
pg_ticks() {
  local total=0 child pid
  for pid in "${PG_PIDS[@]}"; do
    total=$((total + $(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13 + $14 + $15}')))
    for child in $(ps -o pid= --ppid "$pid"); do
      total=$((total + $(ticks_of "$child")))
    done
  done
  echo "$total"
}
veil_ticks() {
  local total=0 pid
  for pid in "${NODE_PIDS[@]}"; do total=$((total + $(ticks_of "$pid"))); done
  echo "$total"
}
pg_counters() {
  local port
  for port in "${PG_PORTS[@]}"; do
    psql_on "$port" "SELECT (SELECT wal_sync FROM pg_stat_wal), (SELECT wal_bytes FROM pg_stat_wal),
                 (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'postgres'),
                 (SELECT coalesce(sum(calls), 0) FROM pg_stat_statements)" | tr '|' ' '
  done | awk '{for (i = 1; i <= NF; i++) s[i] += $i} END {printf "%d %d %d %d\n", s[1], s[2], s[3], s[4]}'
}
reset_pg_counters() {
  local port
  for port in "${PG_PORTS[@]}"; do
    psql_on "$port" "SELECT pg_stat_reset_shared('wal'), pg_stat_statements_reset()" >/dev/null
  done
}

# Waits until an SQS port answers something other than "service unavailable" (a cluster answers 503 until a
# leader has loaded the queues); an unsigned ListQueues is refused by a serving Veil, which is enough.
wait_serving() {
  local port=$1 deadline=$((SECONDS + 60)) code
  while [ $SECONDS -lt $deadline ]; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'x-amz-target: AmazonSQS.ListQueues' \
      -H 'content-type: application/x-amz-json-1.0' --data '{}' "http://127.0.0.1:$port/" 2>/dev/null || true)
    if [ -n "$code" ] && [ "$code" != "000" ] && [ "$code" != "503" ]; then return 0; fi
    sleep 0.2
  done
  echo "cluster.sh: 127.0.0.1:$port still not serving after 60 s" >&2
  return 1
}

# Waits until every partition of SCHEMA (on every instance: shards) is owned and each of NODES nodes owns its
# fair share (⌊P/N⌋ or ⌈P/N⌉), so that a multi-node run does not measure the first seconds' hand-overs to the
# nodes that started last.
wait_settled() {
  local schema=$1 nodes=$2 deadline=$((SECONDS + 60)) owners port
  while [ $SECONDS -lt $deadline ]; do
    owners=$(for port in "${PG_PORTS[@]}"; do
      psql_on "$port" "SELECT CASE WHEN expires_at > clock_timestamp() THEN node ELSE '-' END
                         FROM \"$schema\".veil_partition" 2>/dev/null || true
    done)
    if python3 -c '
import collections, sys
rows = [r for r in sys.stdin.read().split() if r]
owned = collections.Counter(rows)
nodes = int(sys.argv[1])
ok = rows and "-" not in owned and len(owned) == min(nodes, len(rows)) and max(owned.values()) - min(owned.values()) <= 1
sys.exit(0 if ok else 1)' "$nodes" <<<"$owners"; then return 0; fi
    sleep 0.2
  done
  echo "cluster.sh: the partitions of $schema did not settle over $nodes nodes in 60 s" >&2
  return 1
}

# start_node LOGNAME ARGS...: starts one veil serve on four free ports; prints its SQS port.
start_node() {
  local log=$1; shift
  local sqs azure kubemq admin
  # Four ports held open together, so that they differ (one at a time, the kernel may hand out one twice).
  read -r sqs azure kubemq admin < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
  "$VEIL" serve "$@" --sqs-listen "127.0.0.1:$sqs" --azure-listen "127.0.0.1:$azure" \
    --kubemq-listen "127.0.0.1:$kubemq" --admin-listen "127.0.0.1:$admin" --log-level warn \
    >"$TMP/$log.log" 2>&1 &
  NODE_PIDS+=($!)
  LAST_PORT=$sqs
}

# measure ROUND CONFIG LABEL NODES TARGET ENDPOINT: one throughput run with the counters around it.
measure() {
  local round=$1 config=$2 label=$3 nodes=$4 target=$5 endpoint=$6
  local json="$TMP/run-$round-$config.json"
  reset_pg_counters
  sleep 0.2
  local c0 v0 p0 c1 v1 p1 rc=0
  c0=$(pg_counters); v0=$(veil_ticks); p0=$(pg_ticks)
  "$BENCH" run --target "$target" --endpoint "$endpoint" --producers "$CLIENTS" --consumers "$CLIENTS" \
    --queues "$QUEUES" --batch 10 --body-size 1024 --duration "$DURATION" --wait 1 --visibility 30 --json "$json" \
    >"$TMP/run-$round-$config.txt" 2>&1 || rc=$?
  v1=$(veil_ticks)
  # The nodes' (and the bench's) database sessions flush their statistics when they end: stop the nodes
  # first, then read PostgreSQL's counters and CPU (reaped backends land in the postmaster's cutime).
  stop_nodes
  sleep 1
  c1=$(pg_counters); p1=$(pg_ticks)
  grep -E 'throughput|MISSING|DUPLICATE|error' "$TMP/run-$round-$config.txt" | sed "s/^/   /" || true
  python3 - "$json" "$round" "$config" "$label" "$nodes" "$rc" "$(getconf CLK_TCK)" \
    "$v0" "$v1" "$p0" "$p1" "$c0" "$c1" >>"$RESULTS" <<'EOF'
import json, sys
path, rnd, config, label, nodes, rc, hz, v0, v1, p0, p1, c0, c1 = sys.argv[1:]
hz = float(hz)
try:
    report = json.load(open(path))
except (OSError, ValueError):
    report = None
row = {"round": int(rnd), "config": config, "label": label, "nodes": int(nodes), "exit": int(rc)}
if report:
    c = report["counts"]
    received = c["received"]
    row.update(msgs_per_s=report["throughput"]["received_per_s"], received=received,
               missing=c.get("missing"), duplicates=c["duplicates"],
               e2e_p50_us=report["latency_us"]["end_to_end"]["p50"],
               e2e_p99_us=report["latency_us"]["end_to_end"]["p99"])
    if received:
        if int(nodes) > 0:
            row["veil_cpu_us_per_msg"] = (int(v1) - int(v0)) / hz * 1e6 / received
        row["pg_cpu_us_per_msg"] = (int(p1) - int(p0)) / hz * 1e6 / received
        if config != "embedded":
            a, b = [list(map(float, x.split())) for x in (c0, c1)]
            # wal_sync and wal_bytes were reset before the run; xacts and statements are differences.
            row["wal_syncs_per_msg"] = b[0] / received
            row["wal_bytes_per_msg"] = b[1] / received
            row["xacts_per_msg"] = (b[2] - a[2]) / received
            row["statements_per_msg"] = b[3] / received
print(json.dumps(row))
EOF
  tail -1 "$RESULTS" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("   " + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items() if k not in ("round","config","label")))'
}

echo "RUNS=$RUNS DURATION=$DURATION QUEUES=$QUEUES CLIENTS=$CLIENTS veil=$VEIL ($("$VEIL" --version 2>/dev/null || true))"
for round in $(seq "$RUNS"); do
  if wanted embedded; then
    echo "-- round $round/$RUNS · veil embedded"
    rm -rf "$TMP/embedded"
    start_node embedded --data-dir "$TMP/embedded"
    wait_serving "$LAST_PORT"
    measure "$round" embedded "veil, embedded store" 1 veil "http://127.0.0.1:$LAST_PORT"
  fi
  for n in 1 2 3; do
    wanted "pg$n" || continue
    echo "-- round $round/$RUNS · veil on PostgreSQL, $n node(s)"
    schema="bench_r${round}_n${n}_$STAMP"
    endpoints=""
    serving=yes
    for k in $(seq "$n"); do
      start_node "pg$n-node$k" --store "$PGURL" --node-id "n$k" --pg-schema "$schema" --lease-ttl-ms 2000
      endpoints="${endpoints:+$endpoints,}http://127.0.0.1:$LAST_PORT"
      # The first node takes every partition; the others start once it serves and take their share.
      if [ "$k" = 1 ]; then wait_serving "$LAST_PORT" || serving=no; fi
    done
    for e in ${endpoints//,/ }; do wait_serving "${e##*:}" || serving=no; done
    if [ "$serving" = yes ] && [ "$n" -gt 1 ]; then wait_settled "$schema" "$n" || serving=no; fi
    if [ "$serving" = yes ]; then
      measure "$round" "pg$n" "veil, PostgreSQL, $n node$([ "$n" = 1 ] || echo s)" "$n" veil "$endpoints"
    else
      echo "   not measured: the cluster never served (node logs: $TMP/pg$n-node*.log)"
      tail -3 "$TMP/pg$n-node1.log" | sed 's/^/   /'
      stop_nodes
    fi
    psql_q "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null
  done
  if wanted pg2shards; then
    echo "-- round $round/$RUNS · veil on two PostgreSQL shards, 2 nodes"
    schema="bench_r${round}_s2_$STAMP"
    endpoints=""
    serving=yes
    for k in 1 2; do
      start_node "pg2shards-node$k" --store "$PGURL" --pg-shard "$PG2URL" --node-id "s$k" --pg-schema "$schema" \
        --lease-ttl-ms 2000
      endpoints="${endpoints:+$endpoints,}http://127.0.0.1:$LAST_PORT"
      if [ "$k" = 1 ]; then wait_serving "$LAST_PORT" || serving=no; fi
    done
    for e in ${endpoints//,/ }; do wait_serving "${e##*:}" || serving=no; done
    if [ "$serving" = yes ]; then wait_settled "$schema" 2 || serving=no; fi
    if [ "$serving" = yes ]; then
      measure "$round" pg2shards "veil, 2 PostgreSQL shards, 2 nodes" 2 veil "$endpoints"
    else
      echo "   not measured: the cluster never served (node logs: $TMP/pg2shards-node*.log)"
      tail -3 "$TMP/pg2shards-node1.log" | sed 's/^/   /'
      stop_nodes
    fi
    for port in "${PG_PORTS[@]}"; do psql_on "$port" "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null; done
  fi
  # An A/B: the same 1-node run with another veil binary (VEIL_BASELINE) or other arguments
  # (VEIL_BASELINE_ARGS), in the same rounds.
  if { [ -n "${VEIL_BASELINE:-}" ] || [ -n "${VEIL_BASELINE_ARGS:-}" ]; } && wanted pg1base; then
    echo "-- round $round/$RUNS · baseline veil (${VEIL_BASELINE:-$VEIL} ${VEIL_BASELINE_ARGS:-}) on PostgreSQL, 1 node"
    schema="bench_r${round}_base_$STAMP"
    VEIL_SAVED=$VEIL; VEIL=${VEIL_BASELINE:-$VEIL}
    # shellcheck disable=SC2086 # the extra arguments are words
    start_node "pg1base-node1" --store "$PGURL" --node-id "b1" --pg-schema "$schema" --lease-ttl-ms 2000 ${VEIL_BASELINE_ARGS:-}
    VEIL=$VEIL_SAVED
    if wait_serving "$LAST_PORT"; then
      measure "$round" pg1base "baseline veil, PostgreSQL, 1 node" 1 veil "http://127.0.0.1:$LAST_PORT"
    else
      stop_nodes
    fi
    psql_q "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null
  fi
  if wanted skiplocked; then
    echo "-- round $round/$RUNS · pg-skip-locked"
    measure "$round" skiplocked "pg-skip-locked (SQL queue, no Veil)" 0 pg-skip-locked "$PGURL"
    psql_q "DO \$\$DECLARE t text; BEGIN FOR t IN SELECT tablename FROM pg_tables WHERE tablename LIKE 'vbq_%' LOOP EXECUTE format('DROP TABLE %I', t); END LOOP; END\$\$" >/dev/null
  fi
done

# --- The table: medians with min–max over the rounds.
python3 - "$RESULTS" "$RUNS" "$DURATION" "$CLIENTS" "$QUEUES" >"$OUT/cluster-$STAMP.md" <<'EOF'
import json, statistics, sys
path, runs, duration, clients, queues = sys.argv[1:]
rows = [json.loads(line) for line in open(path)]
order = ["embedded", "pg1", "pg2", "pg3", "pg2shards", "pg1base", "skiplocked"]
cols = [("msgs_per_s", "msg/s", 0), ("e2e_p50_us", "e2e p50 ms", -3), ("veil_cpu_us_per_msg", "Veil CPU µs/msg", 1),
        ("pg_cpu_us_per_msg", "PostgreSQL CPU µs/msg", 1), ("wal_syncs_per_msg", "WAL fsyncs/msg", 3),
        ("wal_bytes_per_msg", "WAL bytes/msg", 0), ("xacts_per_msg", "xacts/msg", 3),
        ("statements_per_msg", "statements/msg", 2)]
def fmt(v, d):
    if d == -3:
        return f"{v / 1000:.2f}"
    return f"{v:,.{d}f}"
print(f"Throughput workload: {clients} producers + {clients} consumers over {queues} queues, batches of 10, 1 KiB bodies, {duration} s "
      f"per run, {runs} interleaved rounds; median (min–max).\n")
print("| configuration | " + " | ".join(c[1] for c in cols) + " | lost / dup |")
print("| --- |" + " ---: |" * len(cols) + " --- |")
for config in order:
    rs = [r for r in rows if r["config"] == config]
    if not rs:
        continue
    cells = []
    for key, _, d in cols:
        vs = sorted(r[key] for r in rs if r.get(key) is not None)
        if not vs:
            cells.append("–")
        elif len(vs) == 1:
            cells.append(fmt(vs[0], d))
        else:
            cells.append(f"{fmt(statistics.median(vs), d)} ({fmt(vs[0], d)}–{fmt(vs[-1], d)})")
    lost = sum((r.get("missing") or 0) for r in rs)
    dup = sum(r.get("duplicates", 0) for r in rs)
    failed = sum(1 for r in rs if r["exit"] != 0 or "msgs_per_s" not in r)
    note = f"{lost} / {dup}" + (f", {failed} failed run(s)" if failed else "")
    print(f"| {rs[0]['label']} | " + " | ".join(cells) + f" | {note} |")
EOF
echo
cat "$OUT/cluster-$STAMP.md"
echo "rows: $RESULTS  table: $OUT/cluster-$STAMP.md"
echo
# The lines scripts read (the format is documented at the top).
python3 - "$RESULTS" "$QUEUES" <<'EOF'
import json, statistics, sys
path, queues = sys.argv[1:]
rows = [json.loads(line) for line in open(path)]
names = {"embedded": "embedded", "pg1": "pg", "pg2": "pg", "pg3": "pg", "pg2shards": "pg-2shards",
         "pg1base": "pg-baseline", "skiplocked": "skiplocked"}
def median(rs, key):
    vs = [r[key] for r in rs if r.get(key) is not None]
    return statistics.median(vs) if vs else float("nan")
for config in ["embedded", "pg1", "pg2", "pg3", "pg2shards", "pg1base", "skiplocked"]:
    rs = [r for r in rows if r["config"] == config]
    if not rs:
        continue
    lost = sum((r.get("missing") or 0) for r in rs)
    dup = sum(r.get("duplicates", 0) for r in rs)
    print(f"cluster: config={names[config]} nodes={rs[0]['nodes']} queues={queues} "
          f"msg_per_s={median(rs, 'msgs_per_s'):.0f} lost={lost} duplicated={dup} "
          # The embedded store sends PostgreSQL nothing.
          f"pg_statements_per_msg={0.0 if config == 'embedded' else median(rs, 'statements_per_msg'):.3f} "
          f"pg_cpu_us_per_msg={median(rs, 'pg_cpu_us_per_msg'):.1f}")
EOF
