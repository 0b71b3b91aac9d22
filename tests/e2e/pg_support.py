"""A real PostgreSQL 15 for the cluster tests, and Veil nodes that run on it.

`PgServer` is one PostgreSQL instance of the installed binaries (env VEIL_PG_BIN, default
/usr/lib/postgresql/15/bin; `./scripts/test` installs them with apt-get where missing): `initdb` into a fresh temp
dir, `pg_ctl start` on a free port of 127.0.0.1 with trust authentication, and stop (fast or immediate), kill -9
(the postmaster and every backend: the host died), start again on the same port, `pg_ctl promote`, and a
streaming standby made with `pg_basebackup -R`. initdb and pg_ctl refuse to run as root, so as root they run as
the `postgres` user (`runuser`) in a temp dir that user owns. Missing binaries fail the tests loudly: a cluster
test never skips.

Settings that a standby must not inherit (wal_level, synchronous_standby_names) are given on the pg_ctl command
line (`-o`), never in the data dir's config files, which pg_basebackup copies: a promoted standby that inherited
synchronous_standby_names='*' would wait for a synchronous standby of its own forever. fsync is off: the tests
kill processes, not the machine, and the OS page cache survives a process kill.

`ClusterNode` is a `veil serve --store <postgres> --pg-schema <schema> --node-id <name>` process (no data dir);
`Cluster` is a set of them over one schema, with the lease table's view of who leads. Nodes talk TLS with mutual
authentication between them by default (issue 44, item 3): `cluster_tls_dir()` makes one development set with
`veil cert dev --cluster` per test session, and every node gets `--cluster-ca/--cluster-cert/--cluster-key`
from it unless it is given `tls=None` (plaintext, allowed on loopback) or a directory of its own.
"""

from __future__ import annotations

import atexit
import os
from collections import Counter
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from helpers import VeilServer, free_port, make_client, veil_bin

PG_BIN_DEFAULT = "/usr/lib/postgresql/15/bin"
# Every pg_ctl start/stop/promote waits at most this long (seconds) before the test fails.
PG_CTL_WAIT_S = 30
# How long a node's first lease takes at most (seconds): the lease TTL, a schema migration and the engine load.
CLUSTER_READY_S = 30.0
# The cluster tests' lease: short, so a takeover after a kill -9 takes about a second, not the default 5.
LEASE_TTL_MS = 1000
# Partitions of a test cluster's queues (VEIL_PARTITIONS overrides): more than the three nodes, so that every
# node owns some and a queue's owner is not every node.
CLUSTER_PARTITIONS = int(os.environ.get("VEIL_PARTITIONS", "4"))


def pg_bin() -> Path:
    return Path(os.environ.get("VEIL_PG_BIN", PG_BIN_DEFAULT))


def require_pg_binaries() -> None:
    """Fails the test (never skips it) when the PostgreSQL 15 server binaries are missing."""
    missing = [b for b in ("initdb", "pg_ctl", "pg_basebackup", "psql") if not (pg_bin() / b).is_file()]
    if missing:
        pytest.fail(
            f"PostgreSQL 15 binaries missing from {pg_bin()} ({', '.join(missing)}): install them with "
            "`apt-get install postgresql-15` (./scripts/test does) or point VEIL_PG_BIN at their directory",
            pytrace=False,
        )


def _as_postgres(cmd: list[str]) -> list[str]:
    """initdb and pg_ctl refuse root: as root, run them as the postgres user."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def _run(cmd: list[str], what: str, timeout: float = 60) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{what} exited {proc.returncode}: {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc), so a kill -9 can take the postmaster's backends with it."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command name: state, ppid, ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


class PgServer:
    """One PostgreSQL instance in its own temp dir on its own port of 127.0.0.1."""

    def __init__(self, name: str = "pg", options: tuple[str, ...] = (), port: int | None = None):
        require_pg_binaries()
        self.name = name
        self.port = port or free_port()
        # `-c name=value` settings given on the command line only (see the module docstring).
        self.options = tuple(options)
        self.base = Path(tempfile.mkdtemp(prefix=f"veil-{name}-"))
        if os.geteuid() == 0:
            pg = pwd.getpwnam("postgres")
            os.chown(self.base, pg.pw_uid, pg.pw_gid)
        self.data = self.base / "data"
        self.log = self.base / "postgres.log"

    # ---- lifecycle ----------------------------------------------------------------------------------

    def init(self) -> PgServer:
        _run(_as_postgres([str(pg_bin() / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                           "-E", "UTF8", "--no-sync"]), f"initdb of {self.name}")
        return self

    def start(self) -> PgServer:
        opts = [f"-p {self.port}", f"-k {shlex.quote(str(self.base))}", "-c listen_addresses=127.0.0.1",
                "-c fsync=off", "-c max_connections=200"]
        opts += [f"-c {shlex.quote(o)}" for o in self.options]
        _run(_as_postgres([str(pg_bin() / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
                           "-t", str(PG_CTL_WAIT_S), "-o", " ".join(opts), "start"]),
             f"pg_ctl start of {self.name}\n{self.log_tail()}", timeout=PG_CTL_WAIT_S + 10)
        return self

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop -m fast (clients disconnected, a clean shutdown) or immediate (no shutdown checkpoint)."""
        _run(_as_postgres([str(pg_bin() / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w",
                           "-t", str(PG_CTL_WAIT_S), "stop"]), f"pg_ctl stop of {self.name}",
             timeout=PG_CTL_WAIT_S + 10)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def running(self) -> bool:
        pid = self.postmaster_pid()
        if pid is None:
            return False
        # A killed postmaster may linger as a zombie until its (re)parent reaps it: that is not running.
        return not _zombie(pid)

    def kill9(self) -> None:
        """SIGKILL the postmaster and its backends at once: the database host died."""
        pid = self.postmaster_pid()
        assert pid is not None, f"{self.name} is not running"
        victims = [pid, *_children(pid)]
        for p in victims:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{p}").exists() and not _zombie(p) for p in victims):
            assert time.monotonic() < deadline, f"{self.name}: processes survived SIGKILL: {victims}"
            time.sleep(0.02)

    def promote(self) -> None:
        _run(_as_postgres([str(pg_bin() / "pg_ctl"), "-D", str(self.data), "-w", "-t", str(PG_CTL_WAIT_S),
                           "promote"]), f"pg_ctl promote of {self.name}", timeout=PG_CTL_WAIT_S + 10)

    def standby(self, name: str = "standby") -> PgServer:
        """A streaming standby of this server (pg_basebackup -R), started on its own port."""
        replica = PgServer(name, port=None)
        _run(_as_postgres([str(pg_bin() / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.port),
                           "-U", "postgres", "-D", str(replica.data), "-R", "-X", "stream", "-c", "fast",
                           "--no-sync"]), f"pg_basebackup of {self.name}")
        return replica.start()

    def wait_sync_standby(self, timeout: float = 20) -> None:
        """Until a standby streams synchronously from this primary (commits then wait for its flush)."""
        deadline = time.monotonic() + timeout
        while self.sql("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") != "1":
            assert time.monotonic() < deadline, f"no synchronous standby on {self.name}\n{self.log_tail()}"
            time.sleep(0.1)

    def destroy(self) -> None:
        if self.running():
            try:
                self.stop("immediate")
            except AssertionError:
                self.kill9()
        shutil.rmtree(self.base, ignore_errors=True)

    # ---- access -------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def listen_everywhere(self) -> PgServer:
        """After `init`, before `start`: listen on every address and trust 10.0.0.0/8 too (a node in a
        `NetworkNamespace` reaches the database over its own link)."""
        self.options += ("listen_addresses=*",)
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write("host all all 10.0.0.0/8 trust\n")
        return self

    def url_at(self, host: str) -> str:
        return f"postgres://postgres@{host}:{self.port}/postgres"

    def sql(self, statement: str) -> str:
        """Runs one statement through psql; its unaligned, tuples-only output, stripped."""
        return _run([str(pg_bin() / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                     "-d", "postgres", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c", statement],
                    f"psql on {self.name}", timeout=30).strip()

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return f"(no log for {self.name})"
        return f"--- last {min(lines, len(text))} lines of {self.log} ---\n" + "\n".join(text[-lines:])


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def both_hosts(primary: PgServer, standby: PgServer) -> str:
    """A libpq connection string naming a primary and its standby, connecting to whichever accepts writes."""
    return (f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres dbname=postgres "
            "target_session_attrs=read-write")


# ---- Veil nodes on PostgreSQL --------------------------------------------------------------------------


def partition_of(name: str, count: int, namespace: str = "default") -> int:
    """The partition of a queue, as veil_core::partition::partition_of computes it: FNV-1a (64-bit) over the
    namespace, a zero byte and the name, modulo the count."""
    h = 0xCBF29CE484222325
    for byte in namespace.encode() + b"\0" + name.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % count


class CuttableLink:
    """A TCP forwarder from a port of its own to `target_port`, standing in for the network between one node
    and PostgreSQL. `cut()` makes it a black hole, as a network partition does: bytes in either direction are
    dropped, connections stay open (nothing is reset, so the node learns only from its own timeouts), and new
    connections are accepted and then hear nothing."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.cut_off = threading.Event()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def cut(self) -> None:
        self.cut_off.set()

    def close(self) -> None:
        for s in [self.listener, *self.sockets]:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.sockets.append(client)
            if self.cut_off.is_set():
                continue  # accepted, never answered
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            self.sockets.append(upstream)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                if not self.cut_off.is_set():
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                return
            if self.cut_off.is_set():
                continue  # dropped on the floor
            try:
                dst.sendall(data)
            except OSError:
                return


class NetworkNamespace:
    """A network namespace of its own for one node, with two links to the host: one its clients and the other
    nodes reach it over (`host`, the node's address; `peer`, the host's), and one to PostgreSQL (`db_host`, the
    host's end, where the test's PostgreSQL listens too), which `cut` takes down: the node's packets to the
    database then go nowhere while everything else still reaches it. Needs root and veth links; `available()`
    says whether this machine allows one."""

    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        self.name = f"veil-{tag}"
        octet = 16 + int(tag[:2], 16) % 200
        self.host, self.peer = f"10.{octet}.1.2", f"10.{octet}.1.1"
        self.db_host, self._db_inside = f"10.{octet}.2.1", f"10.{octet}.2.2"
        self._links = (f"vc{tag}", f"vd{tag}")
        self._made = False

    @staticmethod
    def available() -> bool:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            return False
        probe = NetworkNamespace()
        try:
            probe.create()
            return True
        except AssertionError:
            return False
        finally:
            probe.close()

    def _ip(self, *args: str, inside: bool = False) -> None:
        cmd = (["ip", "netns", "exec", self.name, "ip"] if inside else ["ip"]) + list(args)
        _run(cmd, "ip " + " ".join(args), timeout=10)

    def create(self) -> NetworkNamespace:
        self._ip("netns", "add", self.name)
        self._made = True
        self._ip("link", "set", "lo", "up", inside=True)
        for link, (outside, inside) in zip(self._links, ((self.peer, self.host), (self.db_host, self._db_inside))):
            self._ip("link", "add", link, "type", "veth", "peer", "name", f"{link}i")
            self._ip("link", "set", f"{link}i", "netns", self.name)
            self._ip("addr", "add", f"{outside}/24", "dev", link)
            self._ip("link", "set", link, "up")
            self._ip("addr", "add", f"{inside}/24", "dev", f"{link}i", inside=True)
            self._ip("link", "set", f"{link}i", "up", inside=True)
        return self

    def wrap(self, cmd: list[str]) -> list[str]:
        """`cmd` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *cmd]

    def cut(self) -> None:
        """Takes the link to PostgreSQL down, inside the namespace: a black hole for the node's database
        connections, its other links untouched."""
        self._ip("link", "set", f"{self._links[1]}i", "down", inside=True)

    def close(self) -> None:
        if not self._made:
            return
        for link in self._links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)
        self._made = False


def fresh_schema() -> str:
    return f"veil_e2e_{uuid.uuid4().hex[:10]}"


_CLUSTER_TLS: Path | None = None


def make_cluster_tls(out: Path) -> Path:
    """A development set for TLS between nodes (`veil cert dev --cluster`): out/ca.pem, cert.pem, key.pem."""
    _run([veil_bin(), "cert", "dev", "--cluster", "--out", str(out), "--force"], "veil cert dev --cluster")
    return out


def cluster_tls_dir() -> Path:
    """The session's development set for TLS between nodes, made once per test session (process)."""
    global _CLUSTER_TLS
    if _CLUSTER_TLS is None:
        made = Path(tempfile.mkdtemp(prefix="veil-cluster-tls-"))
        atexit.register(shutil.rmtree, made, True)
        _CLUSTER_TLS = make_cluster_tls(made)
    return _CLUSTER_TLS


def cluster_tls_args(tls: Path) -> list[str]:
    return ["--cluster-ca", str(tls / "ca.pem"), "--cluster-cert", str(tls / "cert.pem"),
            "--cluster-key", str(tls / "key.pem")]


# `ClusterNode(tls=SESSION_TLS)`: the session's set (the default).
SESSION_TLS = "session"


class ClusterNode(VeilServer):
    """One `veil serve` node of a cluster: its queues live in PostgreSQL, so it has no data dir. Its internal RPC
    is TLS with the session's development set (`tls=SESSION_TLS`), another set's directory, or plaintext
    (`tls=None`)."""

    def __init__(self, log_dir: Path, store: str, schema: str, node_id: str, lease_ttl_ms: int = LEASE_TTL_MS,
                 extra_args=(), partitions: int = CLUSTER_PARTITIONS, shards: tuple[str, ...] = (),
                 tls: Path | str | None = SESSION_TLS):
        super().__init__(log_dir / node_id, log_dir=log_dir, extra_args=extra_args)
        self.store = store
        self.shards = shards
        self.schema = schema
        self.node_id = node_id
        self.lease_ttl_ms = lease_ttl_ms
        self.partitions = partitions
        self.tls = cluster_tls_dir() if tls == SESSION_TLS else tls

    namespace: NetworkNamespace | None = None

    def in_namespace(self, namespace: NetworkNamespace) -> None:
        """Runs this node inside `namespace`, on its address there (set before `start`)."""
        self.namespace = namespace
        self.host = namespace.host

    def command(self) -> list[str]:
        cmd = super().command()
        return self.namespace.wrap(cmd) if self.namespace else cmd

    def store_args(self) -> list[str]:
        return ["--store", self.store, "--pg-schema", self.schema, "--node-id", self.node_id,
                "--lease-ttl-ms", str(self.lease_ttl_ms), "--partitions", str(self.partitions)] + [
                    arg for shard in self.shards for arg in ("--pg-shard", shard)] + (
                    cluster_tls_args(Path(self.tls)) if self.tls else [])


class Cluster:
    """`size` nodes over one schema of `pg` (or of the connection string `store`), and of each of `shards`
    (more databases the partitions are spread over: partition p on `([pg] + shards)[p % (1 + len(shards))]`)."""

    def __init__(self, pg: PgServer, log_dir: Path, size: int = 3, store: str | None = None,
                 schema: str | None = None, lease_ttl_ms: int = LEASE_TTL_MS, extra_args=(),
                 partitions: int = CLUSTER_PARTITIONS, shards: tuple[PgServer, ...] = ()):
        self.pg = pg
        self.shards = tuple(shards)
        self.schema = schema or fresh_schema()
        self.store = store or pg.url
        self.partitions = partitions
        self.nodes = [
            ClusterNode(Path(log_dir), self.store, self.schema, f"node{i + 1}", lease_ttl_ms, extra_args,
                        partitions, tuple(shard.url for shard in shards))
            for i in range(size)
        ]

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start()
        self.wait_ready()
        return self

    def leader_id(self, pg: PgServer | None = None, partition: int = 0) -> tuple[str, int] | None:
        """(node, epoch) of the unexpired lease of `partition` (with one partition, the node that runs every
        queue), on the database's clock; None while nobody owns it."""
        row = (pg or self.database_of(partition)).sql(
            f"SELECT node || ' ' || epoch FROM {self.schema}.veil_partition "
            f"WHERE partition = {partition} AND expires_at > clock_timestamp()"
        )
        if not row:
            return None
        node, epoch = row.rsplit(" ", 1)
        return node, int(epoch)

    def node(self, node_id: str) -> ClusterNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    @property
    def databases(self) -> tuple[PgServer, ...]:
        """The home (`pg`, which a test may switch to a promoted standby) and the shards, in order."""
        return (self.pg, *self.shards)

    def database_of(self, partition: int) -> PgServer:
        """The shard holding `partition`."""
        return self.databases[partition % len(self.databases)]

    def partition_of(self, name: str, pg: PgServer | None = None) -> int:
        """The partition the catalog places the queue `name` in (any protocol's; names are unique here), read
        from the shard its name hashes to."""
        pg = pg or self.database_of(partition_of(name, self.partitions))
        row = pg.sql(f"SELECT partition FROM {self.schema}.veil_queue WHERE name = '{name}'")
        assert row, f"no queue {name} in the catalog"
        return int(row)

    def owner_id(self, name: str, pg: PgServer | None = None) -> tuple[str, int] | None:
        """(node, epoch) of the lease on the partition of the queue `name`; None while nobody owns it."""
        return self.leader_id(pg, self.partition_of(name, pg))

    def owner(self, name: str) -> ClusterNode:
        """The node running the queue `name` (its partition's lease holder)."""
        held = self.owner_id(name)
        assert held is not None, f"nobody owns the partition of {name}"
        return self.node(held[0])

    def others(self, name: str) -> list[ClusterNode]:
        """The running nodes that send the calls for the queue `name` to its owner."""
        owner = self.owner(name)
        return [n for n in self.nodes if n is not owner and n.running()]

    def wait_ready(self, nodes=None, timeout: float = CLUSTER_READY_S) -> float:
        """Until every partition is owned and every running node (or each of `nodes`) answers an SQS request
        (ListQueues gathers from every partition's owner, so it fails while one has none); returns the seconds
        it took."""
        started = time.monotonic()
        deadline = started + timeout
        pending = list(nodes or [n for n in self.nodes if n.running()])
        last = None
        while pending:
            node = pending[0]
            assert node.running(), f"{node.node_id} died\n{node.log_tail()}"
            try:
                make_client(node.endpoint, read_timeout=5).list_queues()
                pending.pop(0)
                continue
            except Exception as e:  # noqa: BLE001 - any failure is "not ready yet"; the last one is reported
                last = e
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{node.node_id} did not serve within {timeout}s (last error: {last!r})\n{node.log_tail()}"
                )
            time.sleep(0.1)
        self.wait_balanced(deadline)
        return time.monotonic() - started

    def ownership(self, pg: PgServer | None = None) -> Counter:
        """How many partitions each node owns under an unexpired lease (key None: partitions nobody owns), over
        every shard (or on `pg` only)."""
        owned = Counter()
        for database in [pg] if pg else self.databases:
            rows = database.sql(
                f"SELECT CASE WHEN expires_at > clock_timestamp() THEN node ELSE '' END "
                f"FROM {self.schema}.veil_partition"
            )
            owned.update(row or None for row in rows.splitlines())
        return owned

    def wait_balanced(self, deadline: float) -> None:
        """Until every partition is owned and each running node owns its fair share (⌊P/N⌋ or ⌈P/N⌉): the
        tests that do not test joins start from a settled cluster, not from one still handing partitions to the
        nodes that started last."""
        running = {n.node_id for n in self.nodes if n.running()}
        low, high = self.partitions // len(running), -(-self.partitions // len(running))
        while True:
            owned = self.ownership()
            settled = (None not in owned and set(owned) <= running
                       and all(low <= owned.get(node, 0) <= high for node in running))
            if settled:
                return
            assert time.monotonic() < deadline, f"ownership did not settle: {dict(owned)}\n{self.logs()}"
            time.sleep(0.1)

    def kill_all(self) -> None:
        for node in self.nodes:
            node.kill()

    def logs(self) -> str:
        return "\n".join(n.log_tail(20) for n in self.nodes)
