"""TLS between a cluster's nodes with mutual authentication (issue 44, item 3), through real `veil` nodes over a
real PostgreSQL 15 and the real SDK (boto3); docs/cluster.md "TLS between nodes".

Every cluster test runs its nodes with TLS between them (pg_support: the session's `veil cert dev --cluster`
set). Here: a capture of the node-to-node traffic (a TCP relay put between two nodes by advertising the owner
on another loopback address) holds TLS records only — neither the cluster token nor a message body; a plaintext
client, a client without a certificate and one whose certificate comes from a foreign CA are refused by the
internal port, while the cluster's own certificate is served; and the CA and node certificates rotate without
downtime: a bundle of old and new CA, then new node certificates, then the new CA alone, each put in force with
SIGHUP, with calls through every node to every other node's partitions working after each step and a node that
only knows the new CA joining midway. A plaintext cluster advertised beyond loopback is refused at start
(exit 2), and starts with `--cluster-insecure-plaintext` only with a warning. Last, the cluster token's key
rotates without downtime (`veil cluster rotate-token`): calls cross between the nodes throughout, none is
refused, and afterwards the token captured before it is refused by the internal port while the new one opens it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import uuid
from pathlib import Path

import botocore.exceptions
import grpc
import pytest
import requests
from helpers import make_client, wait_until
from pg_support import Cluster, ClusterNode, PgServer, cluster_tls_dir, make_cluster_tls

NODE_NAME = "veil-cluster-node"
# The label the cluster token is an HMAC of (crates/veil-cluster/src/token.rs).
TOKEN_LABEL = b"veil cluster rpc v1"
# HTTP/2's connection preface and an empty SETTINGS frame.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
WITHIN_S = 15.0


@pytest.fixture(scope="module")
def pg():
    server = PgServer("pg-tls").init().start()
    yield server
    server.destroy()


def rpc_addr(pg: PgServer, node: ClusterNode) -> tuple[str, int]:
    """The internal RPC address `node` publishes in its leases."""
    deadline = time.monotonic() + WITHIN_S
    while time.monotonic() < deadline:
        rows = pg.sql(f"SELECT addrs FROM {node.schema}.veil_partition WHERE node = '{node.node_id}' LIMIT 1")
        if rows:
            host, port = json.loads(rows.splitlines()[0])["rpc"].rsplit(":", 1)
            return host, int(port)
        time.sleep(0.05)
    raise AssertionError(f"{node.node_id} published no lease\n{node.log_tail()}")


def cluster_token(cluster: Cluster) -> str:
    secret = bytes.fromhex(cluster.pg.sql(f"SELECT encode(value, 'hex') FROM {cluster.schema}.veil_meta WHERE key = 'secret'"))
    return hmac.new(secret, TOKEN_LABEL, hashlib.sha256).hexdigest()


def queue_owned_by(cluster: Cluster, client, node: ClusterNode) -> str:
    for _ in range(64):
        name = f"tls-{uuid.uuid4().hex[:10]}"
        create_once_served(client, name)
        if cluster.owner(name) is node:
            return name
    raise AssertionError(f"no queue landed on {node.node_id}")


def create_once_served(client, name: str, within_s: float = WITHIN_S) -> None:
    """Creates `name`, waiting while its partition answers ServiceUnavailable: right after a node joins, the
    lease table says who owns each partition before the new owner has opened its store, and a call waits for it
    at most the reroute wait (docs/cluster.md). The join is not what these tests judge; every call after it is."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            client.create_queue(QueueName=name)
            return
        except botocore.exceptions.ClientError as error:
            if error.response["Error"]["Code"] != "ServiceUnavailable" or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Relay:
    """A TCP relay from `listen` to `target` that keeps every byte it carries, each direction apart."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]):
        self.target = target
        self.to_owner = bytearray()
        self.from_owner = bytearray()
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(listen)
        self.listener.listen(64)
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, self.to_owner), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, self.from_owner), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, kept: bytearray) -> None:
        while True:
            try:
                data = src.recv(65536)
                if not data:
                    break
                with self.lock:
                    kept.extend(data)
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        for s in [self.listener, *self.sockets]:
            try:
                s.close()
            except OSError:
                pass


def test_a_capture_between_nodes_holds_neither_the_token_nor_a_body_and_a_plaintext_client_is_refused(
    veil_path, pg, tmp_path
):
    cluster = Cluster(pg, tmp_path, size=2)
    owner = cluster.nodes[1]
    # The owner is reached at 127.0.0.2 (its port), where the relay listens; it binds 127.0.0.1.
    owner.extra_args += ["--cluster-advertise", "127.0.0.2"]
    relay = None
    try:
        for node in cluster.nodes:
            node.start()
        host, port = rpc_addr(pg, owner)
        assert host == "127.0.0.2"
        relay = Relay((host, port), ("127.0.0.1", port))
        cluster.wait_ready()
        entry = make_client(cluster.nodes[0].endpoint, read_timeout=10)
        name = queue_owned_by(cluster, entry, owner)
        url = entry.get_queue_url(QueueName=name)["QueueUrl"]
        body = f"body-in-clear-{uuid.uuid4().hex}"
        entry.send_message(QueueUrl=url, MessageBody=body)
        got = entry.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
        assert [m["Body"] for m in got] == [body]
        with relay.lock:
            to_owner, from_owner = bytes(relay.to_owner), bytes(relay.from_owner)
        assert to_owner and from_owner, "the calls did not go through the relay"
        # TLS records (handshake first), and nothing of the call in clear.
        assert to_owner[0] == 0x16 and to_owner[1] == 0x03, to_owner[:16]
        token = cluster_token(cluster).encode()
        for captured in (to_owner, from_owner):
            assert token not in captured, "the cluster token crossed in clear"
            assert body.encode() not in captured, "a message body crossed in clear"
            assert name.encode() not in captured, "a queue name crossed in clear"
            assert b"x-veil-cluster-token" not in captured

        # A plaintext HTTP/2 client, token and all, gets no HTTP/2 answer: the port speaks TLS only.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:
            plain.sendall(PREFACE)
            answer = read_some(plain)
        assert not is_http2_settings(answer), answer[:32]
    finally:
        if relay:
            relay.close()
        cluster.kill_all()


def read_some(sock, within_s: float = 5.0) -> bytes:
    """What the peer sends before it closes or within `within_s`; an error or a reset reads as nothing more."""
    sock.settimeout(within_s)
    got = b""
    try:
        while len(got) < 9:
            data = sock.recv(4096)
            if not data:
                break
            got += data
    except (OSError, ssl.SSLError):
        pass
    return got


def is_http2_settings(data: bytes) -> bool:
    """Whether `data` starts with an HTTP/2 frame of type SETTINGS (what a server sends first)."""
    return len(data) >= 9 and data[3] == 0x04


def tls_client(ca: Path, cert: Path | None, key: Path | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(str(ca))
    context.set_alpn_protocols(["h2"])
    if cert:
        context.load_cert_chain(str(cert), str(key))
    return context


def http2_answer(port: int, context: ssl.SSLContext) -> bytes:
    """What the internal port answers an HTTP/2 preface over TLS with `context` (nothing once it refused)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=NODE_NAME) as tls:
                tls.sendall(PREFACE)
                return read_some(tls)
        except (OSError, ssl.SSLError):
            return b""


def test_the_internal_port_serves_only_clients_with_a_certificate_of_the_clusters_ca(veil_path, pg, tmp_path):
    foreign = make_cluster_tls(tmp_path / "foreign")
    session = cluster_tls_dir()
    node = ClusterNode(tmp_path, pg.url, f"veil_e2e_{uuid.uuid4().hex[:10]}", "node1")
    try:
        node.start()
        _, port = rpc_addr(pg, node)
        served = http2_answer(port, tls_client(session / "ca.pem", session / "cert.pem", session / "key.pem"))
        assert is_http2_settings(served), f"a node's own certificate was not served: {served[:32]!r}"
        for who, context in [
            ("no client certificate", tls_client(session / "ca.pem", None, None)),
            ("a foreign CA's node certificate", tls_client(session / "ca.pem", foreign / "cert.pem", foreign / "key.pem")),
        ]:
            answer = http2_answer(port, context)
            assert not is_http2_settings(answer), f"a client with {who} was served"
        # And a node verifies the port it connects to: the foreign CA does not vouch for the node's certificate.
        context = tls_client(foreign / "ca.pem", foreign / "cert.pem", foreign / "key.pem")
        with pytest.raises(ssl.SSLError), socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname=NODE_NAME):
            pass
    finally:
        node.kill()


def replace(path: Path, data: bytes) -> None:
    """Writes beside, then renames: a reload never reads half a file (docs/security.md "TLS")."""
    part = path.with_suffix(".part")
    part.write_bytes(data)
    os.replace(part, path)


def reload(nodes, within_s: float = WITHIN_S) -> None:
    """SIGHUP to every node of `nodes`, and until each logged that the cluster's TLS reloaded."""
    done = {n.node_id: n.log_path.read_text(errors="replace").count("cluster's CA bundle and node certificate reloaded")
            for n in nodes}
    for n in nodes:
        n.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + within_s
    for n in nodes:
        while n.log_path.read_text(errors="replace").count("cluster's CA bundle and node certificate reloaded") <= done[n.node_id]:
            assert "NOT reloaded" not in n.log_path.read_text(errors="replace"), n.log_tail()
            assert time.monotonic() < deadline, f"{n.node_id} did not reload\n{n.log_tail()}"
            time.sleep(0.05)


def every_call_crosses(cluster: Cluster, queues: dict[str, str]) -> None:
    """A send and a receive through every running node to every queue (each owned by some node)."""
    for entry in [n for n in cluster.nodes if n.running()]:
        client = make_client(entry.endpoint, read_timeout=10)
        for name in queues:
            url = client.get_queue_url(QueueName=name)["QueueUrl"]
            body = f"via-{entry.node_id}-{uuid.uuid4().hex[:6]}"
            client.send_message(QueueUrl=url, MessageBody=body)
            got = client.receive_message(QueueUrl=url, WaitTimeSeconds=5, MaxNumberOfMessages=10).get("Messages", [])
            assert [m["Body"] for m in got] == [body], f"{name} through {entry.node_id}: {got}"
            client.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])


def test_the_ca_and_node_certificates_rotate_without_downtime(veil_path, pg, tmp_path):
    old = make_cluster_tls(tmp_path / "old")
    new = make_cluster_tls(tmp_path / "new")
    live = []
    for i in range(2):
        d = tmp_path / f"live{i + 1}"
        d.mkdir()
        for f in ("ca.pem", "cert.pem", "key.pem"):
            shutil.copy(old / f, d / f)
        live.append(d)
    cluster = Cluster(pg, tmp_path, size=2)
    for node, d in zip(cluster.nodes, live):
        node.tls = d
    try:
        cluster.start()
        client = make_client(cluster.nodes[0].endpoint, read_timeout=10)
        queues = {queue_owned_by(cluster, client, n): n.node_id for n in cluster.nodes}
        every_call_crosses(cluster, queues)
        # 1. Both CAs accepted everywhere.
        for d in live:
            replace(d / "ca.pem", (old / "ca.pem").read_bytes() + (new / "ca.pem").read_bytes())
        reload(cluster.nodes)
        every_call_crosses(cluster, queues)
        # 2. New node certificates.
        for d in live:
            replace(d / "key.pem", (new / "key.pem").read_bytes())
            replace(d / "cert.pem", (new / "cert.pem").read_bytes())
        reload(cluster.nodes)
        every_call_crosses(cluster, queues)
        # A node that knows only the new CA joins: new handshakes both ways use the new certificates.
        joined = ClusterNode(tmp_path, cluster.store, cluster.schema, "node3", partitions=cluster.partitions, tls=new)
        cluster.nodes.append(joined)
        joined.start()
        cluster.wait_ready()
        queues[queue_owned_by(cluster, client, joined)] = joined.node_id
        every_call_crosses(cluster, queues)
        # 3. The old CA retired.
        for d in live:
            replace(d / "ca.pem", (new / "ca.pem").read_bytes())
        reload(cluster.nodes[:2])
        every_call_crosses(cluster, queues)
        _, port = rpc_addr(pg, cluster.nodes[0])
        retired = http2_answer(port, tls_client(new / "ca.pem", old / "cert.pem", old / "key.pem"))
        assert not is_http2_settings(retired), "a certificate of the retired CA was still served"
    finally:
        cluster.kill_all()


def test_a_plaintext_cluster_beyond_loopback_is_refused_and_the_insecure_flag_warns(veil_path, pg, tmp_path):
    schema = f"veil_e2e_{uuid.uuid4().hex[:10]}"
    # Advertised beyond loopback (nothing binds there: the bind stays 127.0.0.1), without TLS.
    beyond = ["--cluster-advertise", "10.255.255.1"]
    refused = ClusterNode(tmp_path, pg.url, schema, "refused", tls=None, extra_args=beyond)
    proc = subprocess.run(refused.command(), capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert "not loopback and has no TLS" in proc.stderr and "--cluster-insecure-plaintext" in proc.stderr, proc.stderr
    insecure = ClusterNode(tmp_path, pg.url, schema, "insecure", tls=None,
                           extra_args=[*beyond, "--cluster-insecure-plaintext"])
    try:
        insecure.start()
        assert log_appears(insecure, r"WARN.*INSECURE: the cluster RPC is PLAINTEXT"), insecure.log_tail()
    finally:
        insecure.kill()


def log_appears(node: ClusterNode, pattern: str, within_s: float = WITHIN_S) -> bool:
    deadline = time.monotonic() + within_s
    while not re.search(pattern, node.log_path.read_text(errors="replace")):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def rpc_status(port: int, token: str) -> grpc.StatusCode:
    """What the internal port answers an empty call presenting `token`, over TLS with the session's node
    certificate: UNAUTHENTICATED when the token is refused; INVALID_ARGUMENT (the empty call does not decode)
    when it is accepted."""
    session = cluster_tls_dir()
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(session / "ca.pem").read_bytes(),
        private_key=(session / "key.pem").read_bytes(),
        certificate_chain=(session / "cert.pem").read_bytes(),
    )
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials,
                             options=[("grpc.ssl_target_name_override", NODE_NAME)]) as channel:
        call = channel.unary_unary("/veil.cluster.v1.Engine/Call",
                                   request_serializer=lambda body: body, response_deserializer=lambda body: body)
        try:
            call(b"", metadata=[("x-veil-cluster-token", token)], timeout=10)
            return grpc.StatusCode.OK
        except grpc.RpcError as error:
            return error.code()


def rotated_token(cluster: Cluster, generation: int) -> str:
    """The token of a rotated key: its row in veil_meta holds two times (16 bytes), then the key."""
    value = bytes.fromhex(cluster.pg.sql(
        f"SELECT encode(value, 'hex') FROM {cluster.schema}.veil_meta WHERE key = 'rpc_key/{generation}'"))
    return hmac.new(value[16:], TOKEN_LABEL, hashlib.sha256).hexdigest()


def metric(node: ClusterNode, name: str) -> float:
    text = requests.get(f"{node.admin_endpoint}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in {node.node_id}'s metrics")


def rotate_token(veil_path, cluster: Cluster, step_s: int) -> subprocess.CompletedProcess:
    return subprocess.run([veil_path, "--output", "json", "cluster", "rotate-token", "--store", cluster.store,
                           "--pg-schema", cluster.schema, "--step-s", str(step_s)],
                          capture_output=True, text=True, timeout=60)


def test_the_cluster_token_rotates_without_downtime_and_a_captured_token_stops_working(veil_path, pg, tmp_path):
    cluster = Cluster(pg, tmp_path, size=2)
    try:
        cluster.start()
        client = make_client(cluster.nodes[0].endpoint, read_timeout=10)
        queues = {queue_owned_by(cluster, client, n): n.node_id for n in cluster.nodes}
        every_call_crosses(cluster, queues)
        _, port = rpc_addr(pg, cluster.nodes[0])
        captured = cluster_token(cluster)
        assert rpc_status(port, captured) == grpc.StatusCode.INVALID_ARGUMENT, "the cluster's token was refused"
        assert rpc_status(port, "0" * 64) == grpc.StatusCode.UNAUTHENTICATED
        knocks = 1

        # Calls cross between the nodes all through the rotation; not one may fail.
        stop, failures, rounds = threading.Event(), [], [0]

        def traffic():
            while not stop.is_set():
                try:
                    every_call_crosses(cluster, queues)
                    rounds[0] += 1
                except Exception as error:  # noqa: BLE001 - every failure is the finding
                    failures.append(repr(error))

        worker = threading.Thread(target=traffic, daemon=True)
        worker.start()
        rotated = rotate_token(veil_path, cluster, step_s=2)
        assert rotated.returncode == 0, rotated.stderr
        assert json.loads(rotated.stdout)["generation"] == 1, rotated.stdout
        again = rotate_token(veil_path, cluster, step_s=2)
        assert again.returncode == 1 and "a rotation is under way" in again.stderr, (again.returncode, again.stderr)
        for node in cluster.nodes:
            assert log_appears(node, r"keys in force changed.*sends=1.*accepts=\[1\]", within_s=30), node.log_tail()
            assert metric(node, "veil_cluster_token_generation") == 1
        done = rounds[0]
        wait_until(lambda: rounds[0] > done, "a round of calls after the rotation", timeout=30)
        stop.set()
        worker.join(30)
        assert not failures, f"calls failed during the rotation: {failures[:3]}"
        assert sum(metric(n, "veil_cluster_rpc_refused_total") for n in cluster.nodes) == knocks, \
            "a node's call was refused during the rotation"

        # The token captured before the rotation opens nothing now; the new one does.
        assert rpc_status(port, captured) == grpc.StatusCode.UNAUTHENTICATED, "the retired token was accepted"
        assert rpc_status(port, rotated_token(cluster, 1)) == grpc.StatusCode.INVALID_ARGUMENT

        # A node that starts after the rotation sends and accepts the new key from its first call.
        joined = ClusterNode(tmp_path, cluster.store, cluster.schema, "node3", partitions=cluster.partitions)
        cluster.nodes.append(joined)
        joined.start()
        cluster.wait_ready()
        queues[queue_owned_by(cluster, client, joined)] = joined.node_id
        every_call_crosses(cluster, queues)
        assert metric(joined, "veil_cluster_token_generation") == 1
    finally:
        cluster.kill_all()
