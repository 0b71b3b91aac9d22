"""Helpers shared by Veil's end-to-end tests.

They cover starting and stopping the real `veil` binary (`VeilServer`, which serves SQS and Azure Queue
Storage on two free ports), building boto3 clients and Azure connection strings, the digests SQS clients
check (MD5 of the body and the SDK-defined MD5 of message attributes), asserting SQS and Azure errors
precisely, and sending raw SigV4-signed requests for the JSON and Query protocols.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import boto3
import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

REPO = Path(__file__).resolve().parents[2]
ACCOUNT = "000000000000"
DEFAULT_REGION = "us-east-1"
MIB = 1024 * 1024
# The Azure development account every emulator knows (UseDevelopmentStorage=true).
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def veil_bin() -> str:
    return os.environ.get("VEIL_BIN", str(REPO / "target" / "release" / "veil"))


# `veil serve`'s default ports (SQS, Azure, KubeMQ). They lie inside Linux's ephemeral range (32768-60999 for
# 50000), so a server of another test could be handed one and make the README test's defaults collide.
DEFAULT_PORTS = (9324, 10001, 50000)


# Every port handed out in this test session. The kernel may hand the same ephemeral port to two binds in a
# row once the first socket is closed, so one server could be given one port for two listeners (CI saw
# `--sqs-listen` and `--kubemq-listen` both on 57707, and the server refused to start).
_HANDED_OUT: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


# Ports are handed out below the kernel's ephemeral range. A port from inside it (what binding port 0 gives)
# can be taken as the local end of any outgoing connection between the moment it is handed out and the
# moment the server binds it: CI saw a cluster node refuse to start because one of its ports had become the
# source port of a PostgreSQL connection. Nothing takes a port below the range unless it binds it on purpose.
_PORT_LO = 15000
_PORT_HI = min(_ephemeral_range()[0], 32768)  # exclusive
_next_port = _PORT_LO + random.Random(os.getpid()).randrange(_PORT_HI - _PORT_LO)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port free now, outside the ephemeral range, that this session has not handed out before (nor one of
    `veil serve`'s defaults)."""
    global _next_port
    for _ in range(_PORT_HI - _PORT_LO):
        port = _next_port
        _next_port = _PORT_LO + (_next_port + 1 - _PORT_LO) % (_PORT_HI - _PORT_LO)
        if port in DEFAULT_PORTS or port in _HANDED_OUT:
            continue
        if _bindable(port):
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no free port left in {_PORT_LO}..{_PORT_HI}")


class VeilServer:
    """One `veil serve` process on 127.0.0.1:<port> with its own data dir and log file."""

    # The address its listeners bind and its clients use (a node in a network namespace has its own).
    host = "127.0.0.1"

    def __init__(self, data_dir: Path, port: int | None = None, extra_args=(), log_dir: Path | None = None,
                 azure_port: int | None = None, kubemq_port: int | None = None, admin_port: int | None = None):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        # Always a free port of its own: the default 10001 would collide between servers started at once.
        self.azure_port = azure_port or free_port()
        # Likewise for KubeMQ's gRPC default (50000).
        self.kubemq_port = kubemq_port or free_port()
        # And for the admin endpoint's (9325).
        self.admin_port = admin_port or free_port()
        self.extra_args = list(extra_args)
        self.log_dir = Path(log_dir or self.data_dir.parent)
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.starts = 0

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def admin_endpoint(self) -> str:
        """Base URL of the admin endpoint: /metrics, /healthz, /readyz, /api/v1, the console."""
        return f"http://{self.host}:{self.admin_port}"

    @property
    def kubemq_address(self) -> str:
        """host:port of the KubeMQ gRPC endpoint, as the KubeMQ SDKs take it."""
        return f"{self.host}:{self.kubemq_port}"

    @property
    def azure_endpoint(self) -> str:
        """The account URL of the development account (path style)."""
        return f"http://{self.host}:{self.azure_port}/{AZURE_ACCOUNT}"

    def azure_connection_string(self, account: str = AZURE_ACCOUNT, key: str = AZURE_KEY) -> str:
        return azure_connection_string(self.azure_port, account, key)

    def start(self, timeout: float = 20.0) -> "VeilServer":
        assert self.proc is None or self.proc.poll() is not None, "server already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.log_path = self.log_dir / f"veil-{self.port}-{self.starts}.log"
        cmd = self.command()
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        _record_pid(self.proc.pid)
        deadline = time.monotonic() + timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise AssertionError(
                    f"veil exited with code {rc} before listening on port {self.port}\n"
                    f"command: {' '.join(cmd)}\n{self.log_tail()}"
                )
            try:
                for port in (self.port, self.azure_port, self.kubemq_port, self.admin_port):
                    with socket.create_connection((self.host, port), timeout=0.5):
                        pass
                return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(
                    f"veil did not listen on ports {self.port} and {self.azure_port} within {timeout}s\n"
                    f"command: {' '.join(cmd)}\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def store_args(self) -> list[str]:
        """Where the server keeps its queues: the embedded store in its data dir (a cluster node overrides it)."""
        return ["--data-dir", str(self.data_dir)]

    def command(self) -> list[str]:
        return [
            veil_bin(), "serve",
            *self.store_args(),
            "--sqs-listen", f"{self.host}:{self.port}",
            "--azure-listen", f"{self.host}:{self.azure_port}",
            "--kubemq-listen", f"{self.host}:{self.kubemq_port}",
            "--admin-listen", f"{self.host}:{self.admin_port}",
            "--log-level", "info",
            *self.extra_args,
        ]

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code (negative = killed by that signal)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"veil did not exit within {timeout}s of SIGTERM (killed it)\n{self.log_tail()}"
                )
        _forget_pid(self.proc.pid)
        return self.proc.returncode

    def stop_cleanly(self) -> None:
        rc = self.stop()
        assert rc == 0, f"veil exited with code {rc} after SIGTERM, expected a clean 0\n{self.log_tail()}"

    def kill(self) -> None:
        """SIGKILL (kill -9): the crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=20)
        if self.proc is not None:
            _forget_pid(self.proc.pid)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path or not self.log_path.exists():
            return "(no server log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        return f"--- last {min(lines, len(text))} lines of {self.log_path} ---\n" + "\n".join(text[-lines:])


def configured_server(base: Path, config_text: str, extra_args=()) -> VeilServer:
    """A started server whose config file (base/veil.toml) holds `config_text`, data and log in `base`."""
    config = base / "veil.toml"
    config.write_text(config_text)
    return VeilServer(base / "data", log_dir=base, extra_args=["--config", str(config), *extra_args]).start()


def _pid_dir() -> Path | None:
    d = os.environ.get("VEIL_E2E_PID_DIR")
    return Path(d) if d else None


def _record_pid(pid: int) -> None:
    d = _pid_dir()
    if d:
        (d / f"{pid}.pid").write_text(str(pid))


def _forget_pid(pid: int) -> None:
    d = _pid_dir()
    if d:
        try:
            (d / f"{pid}.pid").unlink()
        except FileNotFoundError:
            pass


def make_client(endpoint: str, region: str = DEFAULT_REGION, *, read_timeout: float = 40, attempts: int = 1):
    """A boto3 SQS client for Veil: test credentials, no retries (so every error is seen)."""
    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(
            connect_timeout=5,
            read_timeout=read_timeout,
            retries={"total_max_attempts": attempts, "mode": "standard"},
        ),
    )


def md5_hex(data) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.md5(data).hexdigest()


def md5_of_message_attributes(attrs: dict) -> str:
    """The digest SQS and its SDKs compute over message attributes: for each attribute sorted by name,
    length-prefixed (4-byte big-endian) name, data type, then a transport byte (1 string, 2 binary)
    and the length-prefixed value."""
    buf = bytearray()

    def put(b: bytes):
        buf.extend(struct.pack(">I", len(b)))
        buf.extend(b)

    for name in sorted(attrs):
        a = attrs[name]
        put(name.encode("utf-8"))
        put(a["DataType"].encode("utf-8"))
        if "StringValue" in a:
            buf.append(1)
            put(a["StringValue"].encode("utf-8"))
        else:
            buf.append(2)
            v = a["BinaryValue"]
            put(v if isinstance(v, (bytes, bytearray)) else v.encode("utf-8"))
    return hashlib.md5(bytes(buf)).hexdigest()


def expect_error(fn, code: str, status: int | None = 400, message: str | None = None, **kwargs) -> dict:
    """Call fn(**kwargs), assert it raises a ClientError with exactly `code` (and `status`, and
    `message` as a substring when given); return the error response."""
    with pytest.raises(ClientError) as ei:
        fn(**kwargs)
    resp = ei.value.response
    got_code = resp.get("Error", {}).get("Code")
    got_status = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
    got_msg = resp.get("Error", {}).get("Message", "")
    assert got_code == code, (
        f"{getattr(fn, '__name__', fn)}: expected error code {code!r}, got {got_code!r} "
        f"(HTTP {got_status}, message {got_msg!r})"
    )
    if status is not None:
        assert got_status == status, f"{code}: expected HTTP {status}, got {got_status} ({got_msg!r})"
    if message is not None:
        assert message in got_msg, f"{code}: expected message containing {message!r}, got {got_msg!r}"
    return resp


def queue_attrs(sqs, url, *names) -> dict:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(names) or ["All"])["Attributes"]


def counts(sqs, url) -> tuple[int, int, int]:
    """(visible, not visible, delayed) as ApproximateNumberOfMessages* report them."""
    a = queue_attrs(
        sqs, url,
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed",
    )
    return (
        int(a["ApproximateNumberOfMessages"]),
        int(a["ApproximateNumberOfMessagesNotVisible"]),
        int(a["ApproximateNumberOfMessagesDelayed"]),
    )


def channel_counts(sqs, name: str) -> tuple[int, int]:
    """(visible, in flight) of a KubeMQ channel, as SQS reports them for the queue of the same name in the default
    namespace: how the KubeMQ tests check a settlement without receiving again."""
    visible, hidden, _delayed = counts(sqs, sqs.get_queue_url(QueueName=name)["QueueUrl"])
    return visible, hidden


def channel_name(prefix: str) -> str:
    """A fresh channel name, SQS-legal too (letters, digits, '-'), so cross-protocol checks can use it."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def azure_connection_string(port: int, account: str = AZURE_ACCOUNT, key: str = AZURE_KEY) -> str:
    """A connection string of the Azure endpoint on 127.0.0.1:<port> (path style)."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
        f"QueueEndpoint=http://127.0.0.1:{port}/{account};"
    )


def kubemq_client(server, client_id: str = "veil-e2e", **kwargs):
    """A KubeMQ SDK client of `server`'s gRPC endpoint."""
    from kubemq.queues import Client

    return Client(address=server.kubemq_address, client_id=client_id, **kwargs)


def kubemq_receive(client, channel: str, max_messages: int = 1, wait: int = 1, **kwargs):
    """A KubeMQ pull (`receive_queue_messages`) that must not answer an in-band error."""
    response = client.receive_queue_messages(
        channel=channel, max_messages=max_messages, wait_timeout_in_seconds=wait, **kwargs
    )
    assert not response.is_error, response.error
    return response


def receive(sqs, url, **kwargs) -> list:
    return sqs.receive_message(QueueUrl=url, **kwargs).get("Messages", [])


def receive_one(sqs, url, **kwargs) -> dict:
    msgs = receive(sqs, url, **kwargs)
    assert len(msgs) == 1, f"expected exactly one message, got {len(msgs)}: {[m.get('Body') for m in msgs]}"
    return msgs[0]


def drain(sqs, url, visibility: int = 60, **kwargs) -> list:
    """Receive until an empty long poll of 1 s; every message is kept hidden `visibility` seconds."""
    out = []
    while True:
        msgs = receive(sqs, url, MaxNumberOfMessages=10, VisibilityTimeout=visibility, WaitTimeSeconds=1, **kwargs)
        if not msgs:
            return out
        out.extend(msgs)


def arn(name: str, region: str = DEFAULT_REGION) -> str:
    return f"arn:aws:sqs:{region}:{ACCOUNT}:{name}"


# ---- raw protocol requests -------------------------------------------------------------------------


def signed_post(url: str, body: bytes, headers: dict, region: str = DEFAULT_REGION) -> requests.Response:
    """POST `body` to `url`, signed with SigV4 for `region` (test credentials). A 'Host' in headers is
    sent (and signed) as given."""
    req = AWSRequest(method="POST", url=url, data=body, headers=dict(headers))
    SigV4Auth(Credentials("test", "test"), "sqs", region).add_auth(req)
    return requests.post(url, data=body, headers=dict(req.headers.items()), timeout=40)


def json_call(endpoint: str, action: str, payload, *, region: str = DEFAULT_REGION, raw: bytes | None = None,
              headers: dict | None = None, path: str = "/") -> requests.Response:
    body = raw if raw is not None else json.dumps(payload).encode()
    h = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"}
    h.update(headers or {})
    return signed_post(endpoint + path, body, h, region)


def query_call(endpoint: str, params: dict, *, path: str = "/", region: str = DEFAULT_REGION,
               headers: dict | None = None) -> requests.Response:
    p = {"Version": "2012-11-05", **params}
    body = urllib.parse.urlencode(p).encode()
    h = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
    h.update(headers or {})
    return signed_post(endpoint + path, body, h, region)


def strip_ns(elem: ET.Element) -> ET.Element:
    for e in elem.iter():
        if isinstance(e.tag, str) and "}" in e.tag:
            e.tag = e.tag.split("}", 1)[1]
    return elem


def parse_xml(resp: requests.Response) -> ET.Element:
    try:
        return strip_ns(ET.fromstring(resp.content))
    except ET.ParseError as e:
        raise AssertionError(f"response is not XML ({e}): HTTP {resp.status_code} {resp.text[:500]!r}")


# ---- Azure Queue Storage ---------------------------------------------------------------------------


def azure_name(text: str) -> str:
    """A legal, unique Azure queue name derived from `text` (3-63 of [a-z0-9-], no doubled hyphen)."""
    import re
    import uuid

    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-") or "q"
    return f"{base}-{uuid.uuid4().hex[:8]}"


def expect_azure_error(fn, code: str, status: int, **kwargs):
    """Call fn(**kwargs), assert it raises an azure HttpResponseError with `code` and HTTP `status`;
    return the exception."""
    from azure.core.exceptions import HttpResponseError

    with pytest.raises(HttpResponseError) as ei:
        fn(**kwargs)
    e = ei.value
    got = getattr(e, "error_code", None)
    assert (got, e.status_code) == (code, status), (
        f"expected {code} (HTTP {status}), got {got} (HTTP {e.status_code}): {e.message}"
    )
    return e


def error_details(e) -> dict:
    """The child elements of an Azure <Error> body, by name."""
    body = e.response.text() if callable(getattr(e.response, "text", None)) else e.response.text
    root = ET.fromstring(body.encode("utf-8") if isinstance(body, str) else body)
    return {child.tag: (child.text or "") for child in root}


def azure_full_sas() -> str:
    """An account SAS of the development account with every permission, valid for an hour."""
    from datetime import datetime, timedelta, timezone

    from azure.storage.queue import AccountSasPermissions, ResourceTypes, generate_account_sas

    return generate_account_sas(
        AZURE_ACCOUNT, AZURE_KEY,
        resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True, create=True,
                                         update=True, process=True),
        expiry=datetime.now(timezone.utc) + timedelta(hours=1),
    )


def azure_raw(server, method: str, path: str, query: str = "", headers: dict | None = None, data=None,
              sas: bool = True) -> requests.Response:
    """A raw request to the Azure endpoint: `path` below the account (e.g. '/q/messages'), `query` without
    '?', authorized with a full account SAS unless `sas` is False."""
    params = "&".join(p for p in (query, azure_full_sas() if sas else "") if p)
    url = f"{server.azure_endpoint}{path}" + (f"?{params}" if params else "")
    return requests.request(method, url, headers=headers or {}, data=data, timeout=20)


def azure_error(resp: requests.Response) -> dict:
    """Code and detail fields of a raw Azure error response."""
    root = ET.fromstring(resp.content)
    return {child.tag: (child.text or "") for child in root}


def query_error(resp: requests.Response) -> tuple[int, str, str]:
    """(HTTP status, <Code>, <Message>) of a raw Query protocol error answer."""
    root = parse_xml(resp)
    error = root.find("Error")
    assert error is not None, f"not an ErrorResponse: HTTP {resp.status_code} {resp.text[:500]!r}"
    return resp.status_code, error.findtext("Code", ""), error.findtext("Message", "")


# The test clock (docs/testing.md "Test clock"): a server started with this flag runs on the wall clock
# plus an offset that POST /api/v1/test/clock/advance grows, so a test moves time past a visibility timeout
# instead of sleeping through it.
TEST_CLOCK_ARGS = ("--unsafe-test-clock",)


def advance_clock(server, seconds: float, ca: str | None = None) -> dict:
    """Moves the server's clock `seconds` forward; when this returns, the expiry sweep and a move-task step
    have run at the new time and long polls have been woken to re-check. With `ca`, the admin endpoint serves
    TLS under a certificate of that CA."""
    endpoint = server.admin_endpoint.replace("http://", "https://", 1) if ca else server.admin_endpoint
    resp = requests.post(f"{endpoint}/api/v1/test/clock/advance",
                         json={"by_ms": round(seconds * 1000)}, timeout=10, verify=ca or True)
    assert resp.status_code == 200, f"clock advance refused: HTTP {resp.status_code} {resp.text[:300]!r}"
    return resp.json()


def long_polls_waiting(server, queue: str, namespace: str = "default") -> int:
    """`veil_queue_long_polls_waiting` of one queue: receives parked in a long poll on it now."""
    text = requests.get(f"{server.admin_endpoint}/metrics", timeout=10).text
    for line in text.splitlines():
        if (line.startswith("veil_queue_long_polls_waiting{") and f'queue="{queue}"' in line
                and f'namespace="{namespace}"' in line):
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError(f"no veil_queue_long_polls_waiting sample for {namespace}/{queue}")


def wait_until(condition, what: str, timeout: float = 10.0):
    """Polls `condition()` until it returns a true value (returned); fails after `timeout` seconds. The
    timeout only bounds a broken run: nothing is asserted about how long the condition took."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"after {timeout}s still not: {what}"
        time.sleep(0.02)


def wait_for_long_polls(server, queue_url: str, count: int) -> None:
    """Waits until `count` receives are parked in a long poll on the queue of `queue_url`."""
    name = queue_url.rstrip("/").rsplit("/", 1)[1]
    wait_until(lambda: long_polls_waiting(server, name) >= count, f"{count} long polls parked on {name}")


def port_open(address) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(address) == 0


def bindable_reusing(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:<port> now, with SO_REUSEADDR as tokio's listener sets it."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# A client connection of an earlier test may hold a default port as its ephemeral local port for a while.
PORT_RELEASE_SECONDS = 60


def wait_for_default_ports(ports=DEFAULT_PORTS) -> None:
    """Waits until Veil's default ports can be bound; fails if a server listens on one."""
    deadline = time.monotonic() + PORT_RELEASE_SECONDS
    for port in ports:
        assert not port_open(("127.0.0.1", port)), f"something listens on 127.0.0.1:{port}; cannot test the default"
        while not bindable_reusing(port):
            assert time.monotonic() < deadline, f"127.0.0.1:{port} stayed in use; cannot test the defaults"
            time.sleep(0.5)


def az_executable() -> str:
    """VEIL_AZ_BIN (./scripts/test points it at .venv-az), else an `az` beside this Python or on PATH."""
    import shutil
    import sys

    candidates = [os.environ.get("VEIL_AZ_BIN", ""), str(Path(sys.executable).parent / "az"),
                  str(REPO / ".venv-az" / "bin" / "az"), shutil.which("az") or ""]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("the az CLI is not installed: ./scripts/test installs tests/requirements-az.txt into .venv-az",
                pytrace=False)


# The documentation's snippets (README.md, docs/cli.md), as the tests that run them as written read them.
def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def first_block(text: str, heading: str, lang: str) -> str:
    """The first ```lang block after `heading`."""
    start = text.index(heading)
    found = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, start)
    assert found, f"no {lang} block after {heading!r}"
    return found.group(1)


def lines_of(blocks: list[str]) -> list[str]:
    """Each command line of the blocks, continuation lines joined, comment lines left out."""
    joined = "\n".join(blocks).replace("\\\n", " ")
    return [line for line in (raw.strip() for raw in joined.splitlines()) if line and not line.startswith("#")]
