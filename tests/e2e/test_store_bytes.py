"""No request, whatever its bytes, fails the PostgreSQL store (issue 44, item 2(b)): a randomised end-to-end test.

One real `veil serve --store postgres://…` node (a cluster of one, pg_support.py's PostgreSQL 15) is driven
from a seed with requests whose identifiers and contents carry arbitrary bytes — NUL, C0 controls, DEL,
invalid UTF-8 (raw and percent-encoded, wherever the wire carries bytes), odd Unicode, very long strings, `/`,
`..`, spaces, newlines, percent-encodings, quotes and XML/JSON metacharacters — in every place an identifier
reaches the engine:

- SQS, raw signed JSON and Query requests (the default credential and one limited to `lim-*` queues): the SigV4
  scope region (presigned URL and `Authorization` header), queue names (CreateQueue, GetQueueUrl, the path
  of a `QueueUrl`), a dead-letter target's ARN, tag keys and values, FIFO `MessageGroupId` and
  `MessageDeduplicationId`, message attribute names and types, batch entry ids, bodies;
- Azure Queue Storage, raw HTTP with an account SAS: queue names in the path, metadata names and values
  (`x-ms-meta-*`, on create and on Set Metadata), stored access policy ids (Set Queue ACL), message text (raw
  bytes, character references);
- KubeMQ, raw gRPC with a hand-made protobuf encoding (so that string fields can carry what the SDK would not
  encode): channel, client id, metadata, tags, dead-letter channel, body, on send, batch send, receive, and the
  QueuesUpstream and QueuesDownstream streams;
- the admin API: create (namespace, name), `/api/v1/queues/apply` entries (names, namespaces, tags, metadata,
  dead-letter targets), sends with group and deduplication ids and attributes (what `veil import` sends), with
  the namespace and queue of the path fuzzed too, and a redrive's destination.

Beside them a second tenant (another SQS account) sends to, receives from and deletes on a queue of its own,
back to back from a thread of its own (so that its writes share group commits with the fuzzer's), and every
few requests a round trip on a second queue. Judged after every request: no answer is a 5xx other than a documented throttle (Azure 503 `ServerBusy`; SQS and the admin
API throttle with 400 and 429, KubeMQ with `RESOURCE_EXHAUSTED`), and a KubeMQ call ends in neither `INTERNAL`
(but tonic's own "failed to decode Protobuf message", the gRPC framework refusing a malformed request before
Veil sees it) nor `UNKNOWN`/`UNAVAILABLE`/`DATA_LOSS`, nor an in-band `Error 5xx`; no answer carries
PostgreSQL's text; the node's log never says a store write failed nor that it left a partition; the node stays
up. Every few requests, and at the end: every control send and receive succeeded, the partition's lease
epoch has not moved (a failed store is left and reloaded under a new epoch), and `/readyz` is 200.

Reproduce: the seed is printed; `VEIL_BYTES_SEED=<seed>` replays it, `VEIL_BYTES_REQUESTS=<n>` sets the count
(CI's default is a short run of 400, a few seconds) or `VEIL_BYTES_SECONDS=<s>` a duration,
`VEIL_BYTES_KEEP_GOING=1` records every failing request instead of stopping at the first (waiting for the node
to serve again after each), `VEIL_BYTES_VERBOSE=1` prints every request and its answer. `scripts/fuzz-store-bytes`
runs a long run (docs/reliability.md "Arbitrary bytes against the PostgreSQL store").
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import re
import socket
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field

import boto3
import grpc
import pytest
import requests
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from helpers import ACCOUNT, AZURE_ACCOUNT, DEFAULT_REGION, azure_full_sas
from kubemq.grpc import kubemq_pb2
from pg_support import Cluster, PgServer

# How many fuzzed requests CI sends (VEIL_BYTES_REQUESTS overrides): a few hundred, well under a minute.
REQUESTS_DEFAULT = 400
# The control tenant sends and receives once every this many fuzzed requests, and the lease epoch is read.
CONTROL_EVERY = 10
# One partition: every queue, the control tenant's too, lives in the store a bad write would fail.
PARTITIONS = 1
# How long one fuzzed request may take (seconds) before the test calls it a hang.
REQUEST_TIMEOUT_S = 30
# The node's lease: long, so that a slow round on a busy machine never lets it lapse (a lapse moves the epoch).
LEASE_TTL_MS = 10_000
# How often (seconds) a long run makes a new Azure account SAS (each is valid an hour).
SAS_RENEW_S = 1800
# In keep-going mode, how long the node may take to serve the control tenant again after a store failure.
RECOVERY_S = 60

CONTROL_ACCOUNT = "222222222222"
LIMITED_ACCOUNT_KEY = "AKIDFUZZLIM"
CONFIG = f"""
[sqs]
[[sqs.credentials]]
access_key = "AKIDCONTROL"
secret_key = "control-secret"
account_id = "{CONTROL_ACCOUNT}"

[[sqs.credentials]]
access_key = "{LIMITED_ACCOUNT_KEY}"
secret_key = "lim-secret"
account_id = "{ACCOUNT}"
grants = [{{ queues = "lim-*", permissions = ["send", "receive", "delete", "peek", "admin"] }}]
"""

# PostgreSQL's words, none of which a Veil answer may carry (the fuzzer never generates them itself).
DATABASE_TEXT = re.compile(
    rb"invalid byte sequence|\"UTF8\": 0x|sqlstate|postgres|db error|syntax error at|violates .* constraint|"
    rb"duplicate key|relation \"|encoding \"UTF8\"|character with byte sequence|tokio_postgres",
    re.IGNORECASE,
)
# The node's log lines that say a store failed or a partition was left (crates/veil-postgres/src/store/io.rs,
# crates/veil-store/src/writer.rs, crates/veil-server/src/cluster/mod.rs).
STORE_FAILED = re.compile(r"store write failed|leaving the partition|the store failed|cannot open the partition")

# VEIL_BYTES_VERBOSE=1 prints every request and its answer.
VERBOSE = os.environ.get("VEIL_BYTES_VERBOSE", "") not in ("", "0")

# ---- arbitrary bytes -------------------------------------------------------------------------------------

LEGAL = "abcdefghijklmnopqrstuvwxyz0123456789-_"
ODD = [
    b"\x00", b"\x00\x00", b"\x7f", b"\x1b[31m", b"\x08", b"\x0b", b"\x0c",
    # Invalid UTF-8: a stray continuation, a lone lead, an overlong NUL, a UTF-16 surrogate, beyond U+10FFFF.
    b"\x80", b"\xff", b"\xfe", b"\xc3", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
    # Odd but valid Unicode: accents, bidi override, BOM, noncharacter, NEL, line separator, emoji, CJK.
    "é".encode(), "\u202e".encode(), "\ufeff".encode(), "\uffff".encode(), "\u0085".encode(), "\u2028".encode(),
    "😀".encode(), "队列".encode(),
    b"/", b"//", b"..", b"../", b"/..", b" ", b"  ", b"\t", b"\n", b"\r", b"\r\n",
    b"%00", b"%", b"%2F", b"%2e%2e", b"%ZZ", b"%ff", b"'", b"''", b'"', b"\\", b"\\0", b"<", b">", b"&",
    b"&#0;", b"&#x1;", b"<![CDATA[", b"?", b"#", b";", b",", b"*", b":", b"=", b"+", b"$1", b"{}", b"[]",
    b".fifo", b".", b"-",
]
LONG_LENGTHS = (81, 129, 257, 1025, 4097, 70_000)
INCOMPRESSIBLE_LENGTHS = (4_000, 12_000)


def legal(rng: random.Random, low: int = 1, high: int = 12) -> bytes:
    return "".join(rng.choice(LEGAL) for _ in range(rng.randint(low, high))).encode()


def arbitrary(rng: random.Random) -> bytes:
    """An identifier or text made of legal runs, odd pieces, random bytes and sometimes a very long run; valid
    UTF-8 three times in four (invalid UTF-8 mostly stops at a parser, the rest goes deeper)."""
    raw = arbitrary_bytes(rng)
    if rng.random() < 0.75:
        return raw.decode("utf-8", "replace").encode()
    return raw


def arbitrary_bytes(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.03:
        return b""
    if roll < 0.08:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
    parts = []
    if rng.random() < 0.7:
        parts.append(legal(rng))
    for _ in range(rng.randint(1, 4)):
        pick = rng.random()
        if pick < 0.7:
            parts.append(rng.choice(ODD))
        elif pick < 0.85:
            parts.append(bytes([rng.randrange(256)]))
        elif pick < 0.90:
            parts.append(rng.choice([b"a", b"\x00", "é".encode(), b"\xff", b"/"]) * rng.choice(LONG_LENGTHS))
        elif pick < 0.93:
            # Long and incompressible: past what a btree index entry holds (2,704 bytes) even compressed.
            parts.append(legal(rng, *INCOMPRESSIBLE_LENGTHS))
        else:
            parts.append(legal(rng))
        if rng.random() < 0.4:
            parts.append(legal(rng, 1, 4))
    return b"".join(parts)


def as_text(b: bytes) -> str:
    """`b` as a Python string for a library that takes only text: invalid UTF-8 as lone surrogates, which
    JSON escapes as `\\udcXX` (invalid UTF-16 for the server to refuse)."""
    return b.decode("utf-8", "surrogateescape")


def show(value) -> str:
    """A short, exact rendering of a fuzzed value for the report (long runs abbreviated with their length)."""
    if isinstance(value, (bytes, bytearray)):
        text = repr(bytes(value))
    else:
        text = repr(value)
    if len(text) > 300:
        return f"{text[:200]}…({len(value)} bytes)…{text[-60:]}"
    return text


# ---- encodings the requests carry the bytes in -----------------------------------------------------------


def json_string(b: bytes, rng: random.Random) -> bytes:
    """`b` as a JSON string: escaped as JSON escapes it (NUL as \\u0000), or with its bytes raw (so invalid
    UTF-8 reaches the server's JSON parser as it is), or with invalid UTF-8 as \\udcXX escapes."""
    mode = rng.random()
    if mode < 0.4:
        return json.dumps(as_text(b), ensure_ascii=True).encode()
    if mode < 0.7:
        return json.dumps(as_text(b), ensure_ascii=False).encode("utf-8", "surrogateescape")
    out = bytearray(b'"')
    for byte in b:
        if byte == 0x22:
            out += b'\\"'
        elif byte == 0x5C:
            out += b"\\\\"
        elif byte < 0x20:
            out += b"\\u%04x" % byte
        else:
            out.append(byte)
    out += b'"'
    return bytes(out)


def to_json(value, rng: random.Random) -> bytes:
    """A JSON document whose bytes values are written with `json_string`."""
    if isinstance(value, bytes):
        return json_string(value, rng)
    if isinstance(value, dict):
        return b"{" + b",".join(to_json(k if isinstance(k, bytes) else k.encode(), rng) + b":" + to_json(v, rng)
                                for k, v in value.items()) + b"}"
    if isinstance(value, (list, tuple)):
        return b"[" + b",".join(to_json(v, rng) for v in value) + b"]"
    return json.dumps(value).encode()


def pct(b: bytes, safe: bytes = b"") -> str:
    """`b` percent-encoded (every byte outside `safe` and the unreserved set)."""
    return urllib.parse.quote_from_bytes(b, safe=safe)


def form(params: list[tuple[str, bytes]], rng: random.Random) -> bytes:
    """A form body: names plain, values percent-encoded, or (sometimes) with non-ASCII bytes left raw."""
    pieces = []
    for name, value in params:
        if rng.random() < 0.15:
            encoded = b"".join(bytes([c]) if c >= 0x80 else pct(bytes([c])).encode() for c in value)
        else:
            encoded = pct(value).encode()
        pieces.append(name.encode() + b"=" + encoded)
    return b"&".join(pieces)


def path_segment(b: bytes, rng: random.Random) -> bytes:
    """`b` as a path segment: percent-encoded (so '/' and '..' stay one segment), or mostly raw (the bytes a
    request line can carry at all: no space, CR, LF, '?', '#'; the rest percent-encoded)."""
    if rng.random() < 0.7:
        return pct(b).encode()
    return b"".join(bytes([c]) if 0x21 <= c and c not in b"?#%" else pct(bytes([c])).encode() for c in b)


def header_value(b: bytes) -> bytes:
    """`b` as a header value the request line framing survives: CR and LF percent-encoded, the rest raw."""
    return b.replace(b"\r", b"%0D").replace(b"\n", b"%0A")


def pb_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def pb_bytes(number: int, value: bytes) -> bytes:
    return pb_varint(number << 3 | 2) + pb_varint(len(value)) + value


def pb_int(number: int, value: int) -> bytes:
    return pb_varint(number << 3) + pb_varint(value)


# ---- one request and what it answered --------------------------------------------------------------------


@dataclass
class Answer:
    status: str  # "HTTP 400", "gRPC OK", ...
    body: bytes
    failed: str | None = None  # why this answer breaks the rule, if it does


@dataclass
class Request:
    index: int
    front: str  # sqs-json, sqs-query, sqs-region, azure, kubemq, admin
    action: str
    inputs: dict[str, bytes] = field(default_factory=dict)
    note: str = ""

    def describe(self) -> str:
        shown = ", ".join(f"{k}={show(v)}" for k, v in self.inputs.items())
        return f"#{self.index} {self.front} {self.action}: {shown}{self.note}"


def http_answer(status: int, body: bytes, throttle: bytes | None = None) -> Answer:
    answer = Answer(f"HTTP {status}", body)
    if status >= 500 and not (status == 503 and throttle is not None and throttle in body):
        answer.failed = f"answered HTTP {status}"
    return answer


def raw_http(port: int, method: str, target: bytes, headers: list[tuple[bytes, bytes]],
             body: bytes = b"") -> tuple[int, bytes]:
    """One HTTP/1.1 request written byte for byte (target and headers as given), its status and body."""
    head = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1:%d" % port]
    head += [name + b": " + value for name, value in headers]
    head += [b"Content-Length: %d" % len(body), b"Connection: close"]
    with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT_S) as sock:
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        return response.status, response.read()


# ---- the control tenant's load -----------------------------------------------------------------------------


class ControlLoad:
    """The control tenant's own traffic while the fuzzer runs: a thread sending to, receiving from and deleting
    on a queue of its own, back to back, so that its writes share group commits with the fuzzer's. Every error
    it meets is kept for the next control round to report."""

    def __init__(self, client, url: str):
        self.client = client
        self.url = url
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.round_trips = 0
        self.thread = threading.Thread(target=self._run, name="control-load", daemon=True)

    def start(self) -> ControlLoad:
        self.thread.start()
        return self

    def take_errors(self) -> list[str]:
        with self.lock:
            errors, self.errors = self.errors, []
        return errors

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=REQUEST_TIMEOUT_S * 2)

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            body = f"load-{n}"
            try:
                self.client.send_message(QueueUrl=self.url, MessageBody=body)
                got = self.client.receive_message(QueueUrl=self.url, MaxNumberOfMessages=1, WaitTimeSeconds=5,
                                                  VisibilityTimeout=30).get("Messages", [])
                if [m["Body"] for m in got] != [body]:
                    raise AssertionError(f"sent {body!r}, received {[m['Body'] for m in got]!r}")
                self.client.delete_message(QueueUrl=self.url, ReceiptHandle=got[0]["ReceiptHandle"])
                self.round_trips += 1
            except Exception as e:  # noqa: BLE001 - every failure of the control tenant is a finding
                with self.lock:
                    self.errors.append(f"{time.strftime('%H:%M:%S')} {e!r}"[:300])
                # Whatever is left in the queue would answer the next receive: start again from an empty one.
                self._drain()

    def _drain(self) -> None:
        # The store may still be down: then the next round trip fails and says so.
        with contextlib.suppress(Exception):
            while got := self.client.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10,
                                                     WaitTimeSeconds=0).get("Messages", []):
                for m in got:
                    self.client.delete_message(QueueUrl=self.url, ReceiptHandle=m["ReceiptHandle"])


# ---- the fuzzer ------------------------------------------------------------------------------------------


class StoreBytesFuzzer:
    def __init__(self, node, pg: PgServer, schema: str, rng: random.Random):
        self.node = node
        self.pg = pg
        self.schema = schema
        self.rng = rng
        self._sas: tuple[float, str] | None = None
        self.log_offset = 0
        self.failures: list[str] = []
        self.sent_control = 0
        self.grpc = grpc.insecure_channel(node.kubemq_address,
                                          options=[("grpc.max_send_message_length", 8 * 1024 * 1024)])
        self.control = self.control_client()
        self.sqs = boto3.client(
            "sqs", endpoint_url=node.endpoint, region_name=DEFAULT_REGION, aws_access_key_id="test",
            aws_secret_access_key="test",
            config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))

    def control_client(self):
        """The control tenant's SQS client (another account), without retries: every error is seen."""
        return boto3.client(
            "sqs", endpoint_url=self.node.endpoint, region_name=DEFAULT_REGION, aws_access_key_id="AKIDCONTROL",
            aws_secret_access_key="control-secret",
            config=Config(connect_timeout=5, read_timeout=REQUEST_TIMEOUT_S,
                          retries={"total_max_attempts": 1, "mode": "standard"}))

    @property
    def sas(self) -> str:
        """An account SAS (valid an hour), made again every half hour so that a long run never outlives it."""
        if self._sas is None or time.monotonic() - self._sas[0] > SAS_RENEW_S:
            self._sas = (time.monotonic(), azure_full_sas())
        return self._sas[1]

    # ---- setup and the judges ----

    def setup(self) -> None:
        self.control_url = self.control.create_queue(QueueName="control")["QueueUrl"]
        load_url = self.control.create_queue(QueueName="control-load")["QueueUrl"]
        self.load = ControlLoad(self.control_client(), load_url)
        self.std_url = self.sqs.create_queue(QueueName="fz-std")["QueueUrl"]
        self.fifo_url = self.sqs.create_queue(QueueName="fz-fifo.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        status, body = raw_http(self.node.azure_port, "PUT", f"/{AZURE_ACCOUNT}/fz-azure?{self.sas}".encode(), [])
        assert status == 201, body
        assert self.kubemq_send_raw(pb_bytes(2, b"setup") + pb_bytes(3, b"fz-kmq") + pb_bytes(5, b"x"))[0] == "OK"
        self.epochs = self.epoch_sum()
        self.skip_log()

    def epoch_sum(self) -> str:
        return self.pg.sql(f"SELECT string_agg(partition || ':' || epoch, ',' ORDER BY partition) "
                           f"FROM {self.schema}.veil_partition")

    def skip_log(self) -> None:
        self.log_offset = self.node.log_path.stat().st_size

    def new_log(self) -> str:
        with open(self.node.log_path, "rb") as f:
            f.seek(self.log_offset)
            text = f.read()
        self.log_offset += len(text)
        return text.decode("utf-8", "replace")

    def judge(self, request: Request, answer: Answer) -> list[str]:
        problems = []
        if answer.failed:
            problems.append(answer.failed)
        leaked = DATABASE_TEXT.search(answer.body)
        if leaked:
            problems.append(f"the answer carries database text {leaked.group(0)!r}")
        failed_lines = [line for line in self.new_log().splitlines() if STORE_FAILED.search(line)]
        if failed_lines:
            problems.append("the node's log says: " + " | ".join(line[-400:] for line in failed_lines[:3]))
        if not self.node.running():
            problems.append("the node died")
        return problems

    def control_round(self) -> list[str]:
        """The other tenant's send and receive, and the partition's epoch: both must be untouched."""
        problems = []
        self.sent_control += 1
        body = f"control-{self.sent_control}-{uuid.uuid4().hex[:6]}"
        try:
            self.control.send_message(QueueUrl=self.control_url, MessageBody=body)
            got = self.control.receive_message(QueueUrl=self.control_url, MaxNumberOfMessages=1, WaitTimeSeconds=5,
                                               VisibilityTimeout=30).get("Messages", [])
            if [m["Body"] for m in got] != [body]:
                problems.append(f"the control tenant sent {body!r} and received {[m['Body'] for m in got]!r}")
            for m in got:
                self.control.delete_message(QueueUrl=self.control_url, ReceiptHandle=m["ReceiptHandle"])
        except Exception as e:  # noqa: BLE001 - any failure of the control tenant is the finding
            problems.append(f"the control tenant's send/receive failed: {e!r}")
        load_errors = self.load.take_errors()
        if load_errors:
            problems.append(f"the control tenant's concurrent load got {len(load_errors)} errors, first: "
                            + " | ".join(load_errors[:3]))
        epochs = self.epoch_sum()
        if epochs != self.epochs:
            problems.append(f"the partition's lease epoch moved from {self.epochs} to {epochs} (its store was "
                            "left and reloaded)")
            self.epochs = epochs
        return problems

    def recover(self) -> None:
        """Keep-going mode: until the node serves the control tenant again, then past any log it wrote."""
        deadline = time.monotonic() + RECOVERY_S
        while True:
            assert self.node.running(), f"the node died\n{self.node.log_tail()}"
            try:
                self.control.send_message(QueueUrl=self.control_url, MessageBody="recovery")
                break
            except Exception:  # noqa: BLE001 - "not serving yet"
                assert time.monotonic() < deadline, f"the node did not serve again\n{self.node.log_tail()}"
                time.sleep(0.2)
        # Drain the control queue of what the failed rounds and the recovery left in it.
        while True:
            left = self.control.receive_message(QueueUrl=self.control_url, MaxNumberOfMessages=10,
                                                WaitTimeSeconds=0).get("Messages", [])
            if not left:
                break
            for m in left:
                self.control.delete_message(QueueUrl=self.control_url, ReceiptHandle=m["ReceiptHandle"])
        self.epochs = self.epoch_sum()
        self.skip_log()

    def run(self, count: int | None, seconds: float | None, keep_going: bool, seed: int) -> int:
        """Sends `count` fuzzed requests, or as many as fit in `seconds`; returns how many it sent."""
        generators = [
            self.sqs_json, self.sqs_json, self.sqs_query, self.sqs_query, self.sqs_region, self.sqs_region,
            self.azure, self.azure, self.kubemq, self.kubemq, self.admin, self.admin, self.admin,
        ]
        recent: list[Request] = []
        self.load.start()
        deadline = time.monotonic() + seconds if seconds else None
        index = 0
        while True:
            if count is not None and index >= count or deadline is not None and time.monotonic() >= deadline:
                break
            request = Request(index, "", "")
            try:
                answer = self.rng.choice(generators)(request)
            except (requests.Timeout, TimeoutError) as e:
                answer = Answer("no answer", b"", f"no answer within {REQUEST_TIMEOUT_S} s: {e!r}")
            except (requests.RequestException, OSError, http.client.HTTPException) as e:
                # The connection closed without an answer: an HTTP or gRPC layer may refuse malformed bytes so.
                # Whether that hid a store failure, the log, the epoch and the control tenant still say.
                answer = Answer(f"connection closed ({type(e).__name__})", b"")
            recent = (recent + [request])[-CONTROL_EVERY:]
            if VERBOSE:
                print(f"{request.describe()[:400]}\n    -> {answer.status} {show(answer.body[:200])}", flush=True)
            problems = self.judge(request, answer)
            if problems:
                self.fail(seed, request, answer, problems, keep_going)
            if index % CONTROL_EVERY == CONTROL_EVERY - 1:
                late = self.control_round() + self.judge(request, Answer("(control round)", b""))
                if late:
                    # Found only now: one of the requests since the last round did it.
                    culprit = Request(index, "control", "round")
                    culprit.note = "one of: " + "; ".join(r.describe() for r in recent)
                    self.fail(seed, culprit, Answer("(control round)", b""), late, keep_going)
            index += 1
            if index % 1000 == 0:
                print(f"store-bytes: {index} requests, {len(self.failures)} failures", flush=True)
        self.load.finish()
        late = self.control_round() + self.judge(Request(index, "node", "end"), Answer("(end)", b""))
        if self.load.round_trips == 0:
            late.append("the control tenant's concurrent load never completed a round trip")
        if late:
            ended = Request(index, "control", "end round")
            ended.note = "one of: " + "; ".join(r.describe() for r in recent)
            self.fail(seed, ended, Answer("(control round)", b""), late, keep_going)
        ready = requests.get(f"{self.node.admin_endpoint}/readyz", timeout=10)
        if ready.status_code != 200:
            self.fail(seed, Request(index, "node", "readyz"), http_answer(ready.status_code, ready.content),
                      [f"/readyz answered {ready.status_code}"], keep_going)
        return index

    def fail(self, seed: int, request: Request, answer: Answer, problems: list[str], keep_going: bool) -> None:
        report = (f"{request.describe()}\n    -> {answer.status} {show(answer.body[:600])}\n    "
                  + "\n    ".join(problems))
        print(f"STORE-BYTES FAILURE (VEIL_BYTES_SEED={seed}): {report}", flush=True)
        self.failures.append(report)
        if not keep_going:
            pytest.fail(f"VEIL_BYTES_SEED={seed} (request {request.index}): {report}\n{self.node.log_tail(15)}",
                        pytrace=False)
        self.recover()
        hurt = self.load.take_errors()
        if hurt:
            note = (f"    meanwhile the control tenant's concurrent load got {len(hurt)} errors, first: "
                    + " | ".join(hurt[:2]))
            print(note, flush=True)
            self.failures[-1] += "\n" + note

    # ---- SQS ----

    def sqs_signed(self, action: str, body: bytes, protocol: str, region: str = DEFAULT_REGION,
                   key: str = "test", secret: str = "test", path: str = "/") -> tuple[int, bytes]:
        url = self.node.endpoint + path
        if protocol == "json":
            headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"}
        else:
            headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
        req = AWSRequest(method="POST", url=url, data=body, headers=headers)
        SigV4Auth(Credentials(key, secret), "sqs", region).add_auth(req)
        resp = requests.post(url, data=body, headers=dict(req.headers.items()), timeout=REQUEST_TIMEOUT_S)
        return resp.status_code, resp.content

    def sqs_params(self, request: Request) -> tuple[str, dict]:
        """An SQS action and its parameters, the fuzzed ones as bytes."""
        rng = self.rng
        x = arbitrary(rng)
        kind = rng.randrange(9)
        if kind == 0:
            name = x + (b".fifo" if rng.random() < 0.3 else b"")
            request.inputs["QueueName"] = name
            params = {"QueueName": name}
            if name.endswith(b".fifo"):
                params["Attributes"] = {"FifoQueue": "true"}
            if rng.random() < 0.4:
                key, value = arbitrary(rng), arbitrary(rng)
                request.inputs.update({"tag key": key, "tag value": value})
                params["tags"] = {key: value}
            return "CreateQueue", params
        if kind == 1:
            request.inputs["QueueName"] = x
            return "GetQueueUrl", {"QueueName": x}
        if kind == 2:
            request.inputs["MessageGroupId"] = x
            dedup = arbitrary(rng) if rng.random() < 0.5 else uuid.uuid4().hex.encode()
            request.inputs["MessageDeduplicationId"] = dedup
            return "SendMessage", {"QueueUrl": self.fifo_url, "MessageBody": arbitrary(rng) or b"b",
                                   "MessageGroupId": x, "MessageDeduplicationId": dedup}
        if kind == 3:
            request.inputs["MessageDeduplicationId"] = x
            return "SendMessage", {"QueueUrl": self.fifo_url, "MessageBody": b"b", "MessageGroupId": b"g",
                                   "MessageDeduplicationId": x}
        if kind == 4:
            data_type = rng.choice([b"String", b"String." + arbitrary(rng), arbitrary(rng)])
            request.inputs.update({"attribute name": x, "attribute type": data_type})
            return "SendMessage", {"QueueUrl": self.std_url, "MessageBody": b"b",
                                   "MessageAttributes": {x: {"DataType": data_type, "StringValue": arbitrary(rng)}}}
        if kind == 5:
            value = arbitrary(rng)
            request.inputs.update({"tag key": x, "tag value": value})
            return "TagQueue", {"QueueUrl": self.std_url, "Tags": {x: value}}
        if kind == 6:
            request.inputs["dead-letter queue name"] = x
            arn = f"arn:aws:sqs:{DEFAULT_REGION}:{ACCOUNT}:".encode() + x
            policy = b'{"deadLetterTargetArn":' + json_string(arn, rng) + b',"maxReceiveCount":"3"}'
            return "SetQueueAttributes", {"QueueUrl": self.std_url, "Attributes": {"RedrivePolicy": policy}}
        if kind == 7:
            request.inputs["QueueUrl queue name"] = x
            url = f"{self.node.endpoint}/{ACCOUNT}/".encode() + x
            return "SendMessage", {"QueueUrl": url, "MessageBody": b"b"}
        request.inputs["batch entry Id"] = x
        return "SendMessageBatch", {"QueueUrl": self.fifo_url, "Entries": [
            {"Id": x, "MessageBody": arbitrary(rng) or b"b", "MessageGroupId": arbitrary(rng) or b"g",
             "MessageDeduplicationId": uuid.uuid4().hex.encode()}]}

    def sqs_json(self, request: Request) -> Answer:
        request.front = "sqs-json"
        action, params = self.sqs_params(request)
        request.action = action
        status, body = self.sqs_signed(action, to_json(params, self.rng), "json")
        return http_answer(status, body)

    def sqs_query(self, request: Request) -> Answer:
        request.front = "sqs-query"
        action, params = self.sqs_params(request)
        request.action = action
        flat: list[tuple[str, bytes]] = [("Action", action.encode()), ("Version", b"2012-11-05")]
        for name, value in params.items():
            if name in ("Attributes", "tags", "Tags"):
                prefix = {"Attributes": "Attribute", "tags": "Tag", "Tags": "Tag"}[name]
                for i, (k, v) in enumerate(value.items(), 1):
                    k = k if isinstance(k, bytes) else k.encode()
                    v = v if isinstance(v, bytes) else v.encode()
                    flat += [(f"{prefix}.{i}.{'Name' if prefix == 'Attribute' else 'Key'}", k),
                             (f"{prefix}.{i}.Value", v)]
            elif name == "MessageAttributes":
                for i, (k, v) in enumerate(value.items(), 1):
                    flat += [(f"MessageAttribute.{i}.Name", k), (f"MessageAttribute.{i}.Value.DataType", v["DataType"]),
                             (f"MessageAttribute.{i}.Value.StringValue", v["StringValue"])]
            elif name == "Entries":
                for i, entry in enumerate(value, 1):
                    flat += [(f"SendMessageBatchRequestEntry.{i}.{k}", v) for k, v in entry.items()]
            else:
                flat.append((name, value if isinstance(value, bytes) else value.encode()))
        status, body = self.sqs_signed(action, form(flat, self.rng), "query")
        return http_answer(status, body)

    def sqs_region(self, request: Request) -> Answer:
        """A request signed for a fuzzed region: the region names the namespace CreateQueue writes."""
        rng = self.rng
        request.front = "sqs-region"
        # The scope is split at '/', so a region never holds one.
        region_bytes = arbitrary(rng).replace(b"/", b"")
        region = as_text(region_bytes)
        request.inputs["region"] = region_bytes
        key, secret, name = ("test", "test", "fz-region")
        if rng.random() < 0.3:
            key, secret, name = (LIMITED_ACCOUNT_KEY, "lim-secret", "lim-region")
            request.inputs["access key"] = key.encode()
        how = rng.choice(["presigned", "header-json", "header-query"])
        request.action = f"CreateQueue ({how})"
        try:
            if how == "presigned":
                url = self.node.endpoint + "/?" + urllib.parse.urlencode(
                    {"Action": "CreateQueue", "QueueName": name, "Version": "2012-11-05"})
                req = AWSRequest(method="GET", url=url)
                SigV4QueryAuth(Credentials(key, secret), "sqs", region, expires=300).add_auth(req)
                resp = requests.get(req.url, timeout=REQUEST_TIMEOUT_S)
                return http_answer(resp.status_code, resp.content)
            if how == "header-json":
                status, body = self.sqs_signed("CreateQueue", json.dumps({"QueueName": name}).encode(), "json",
                                               region, key, secret)
            else:
                status, body = self.sqs_signed("CreateQueue", f"Action=CreateQueue&QueueName={name}".encode(),
                                               "query", region, key, secret)
            return http_answer(status, body)
        except (UnicodeEncodeError, ValueError, http.client.InvalidURL) as e:
            # The client library cannot put these bytes in a header or URL at all: nothing was sent.
            return Answer(f"not sendable ({type(e).__name__})", b"")

    # ---- Azure ----

    def azure(self, request: Request) -> Answer:
        rng = self.rng
        request.front = "azure"
        x = arbitrary(rng)
        kind = rng.randrange(5)
        version = [(b"x-ms-version", b"2021-02-12")]
        if kind == 0:
            request.action = "Create Queue"
            request.inputs["queue name"] = x
            headers = version
            if rng.random() < 0.5:
                meta_name, meta_value = legal(rng) + arbitrary(rng), arbitrary(rng)
                request.inputs.update({"metadata name": meta_name, "metadata value": meta_value})
                headers = version + [(b"x-ms-meta-" + header_value(meta_name), header_value(meta_value))]
            target = f"/{AZURE_ACCOUNT}/".encode() + path_segment(x, rng) + b"?" + self.sas.encode()
            status, body = raw_http(self.node.azure_port, "PUT", target, headers)
        elif kind == 1:
            request.action = "Set Queue Metadata"
            value = arbitrary(rng)
            request.inputs.update({"metadata name": x, "metadata value": value})
            target = f"/{AZURE_ACCOUNT}/fz-azure?comp=metadata&{self.sas}".encode()
            status, body = raw_http(self.node.azure_port, "PUT", target,
                                    version + [(b"x-ms-meta-" + header_value(x), header_value(value))])
        elif kind == 2:
            request.action = "Put Message"
            request.inputs["message text"] = x
            xml = b"<QueueMessage><MessageText>" + x + b"</MessageText></QueueMessage>"
            target = f"/{AZURE_ACCOUNT}/fz-azure/messages?{self.sas}".encode()
            status, body = raw_http(self.node.azure_port, "POST", target, version, xml)
        elif kind == 3:
            request.action = "Set Queue ACL"
            request.inputs["signed identifier Id"] = x
            acl = (b"<SignedIdentifiers><SignedIdentifier><Id>" + x + b"</Id><AccessPolicy>"
                   b"<Start>2026-01-01T00:00:00Z</Start><Expiry>2099-01-01T00:00:00Z</Expiry><Permission>r</Permission>"
                   b"</AccessPolicy></SignedIdentifier></SignedIdentifiers>")
            target = f"/{AZURE_ACCOUNT}/fz-azure?comp=acl&{self.sas}".encode()
            status, body = raw_http(self.node.azure_port, "PUT", target, version, acl)
        else:
            request.action = "Put Message (queue in the path)"
            request.inputs["queue name"] = x
            xml = b"<QueueMessage><MessageText>text</MessageText></QueueMessage>"
            target = f"/{AZURE_ACCOUNT}/".encode() + path_segment(x, rng) + b"/messages?" + self.sas.encode()
            status, body = raw_http(self.node.azure_port, "POST", target, version, xml)
        return http_answer(status, body, throttle=b"ServerBusy")

    # ---- KubeMQ ----

    def kubemq_call(self, method: str, payload: bytes, reply) -> tuple[str, object]:
        call = self.grpc.unary_unary(f"/kubemq.kubemq/{method}", request_serializer=None,
                                     response_deserializer=reply.FromString)
        try:
            return "OK", call(payload, timeout=REQUEST_TIMEOUT_S)
        except grpc.RpcError as e:
            return e.code().name, e.details() or ""

    def kubemq_stream(self, method: str, payload: bytes, reply) -> tuple[str, object]:
        """One request on a bidirectional stream and its first answer; the stream is then closed."""
        call = self.grpc.stream_stream(f"/kubemq.kubemq/{method}", request_serializer=None,
                                       response_deserializer=reply.FromString)
        answered = threading.Event()

        def one_request():
            yield payload
            answered.wait(REQUEST_TIMEOUT_S)

        responses = call(one_request(), timeout=REQUEST_TIMEOUT_S)
        try:
            return "OK", next(responses)
        except StopIteration:
            return "OK", reply()
        except grpc.RpcError as e:
            return e.code().name, e.details() or ""
        finally:
            answered.set()
            responses.cancel()

    def kubemq_send_raw(self, message: bytes) -> tuple[str, object]:
        return self.kubemq_call("SendQueueMessage", message, kubemq_pb2.SendQueueMessageResult)

    def kubemq_message(self, request: Request, channel: bytes = b"fz-kmq") -> bytes:
        rng = self.rng
        fields = {"ClientID": (2, b"fuzz"), "Channel": (3, channel), "Metadata": (4, b""), "Body": (5, b"body")}
        message = pb_bytes(1, uuid.uuid4().hex.encode())
        fuzzed = rng.choice(["ClientID", "Channel", "Metadata", "Body", "Tags", "MaxReceiveQueue"])
        x = arbitrary(rng)
        request.inputs[fuzzed] = x
        for name, (number, value) in fields.items():
            message += pb_bytes(number, x if name == fuzzed else value)
        if fuzzed == "Tags":
            value = arbitrary(rng)
            request.inputs["tag value"] = value
            message += pb_bytes(6, pb_bytes(1, x) + pb_bytes(2, value))
        if fuzzed == "MaxReceiveQueue":
            message += pb_bytes(8, pb_int(3, 2) + pb_bytes(4, x))
        return message

    def kubemq(self, request: Request) -> Answer:
        rng = self.rng
        request.front = "kubemq"
        kind = rng.randrange(5)
        if kind == 0:
            request.action = "SendQueueMessage"
            code, reply = self.kubemq_send_raw(self.kubemq_message(request))
        elif kind == 1:
            request.action = "SendQueueMessagesBatch"
            batch = pb_bytes(1, b"batch") + pb_bytes(2, self.kubemq_message(request))
            code, reply = self.kubemq_call("SendQueueMessagesBatch", batch, kubemq_pb2.QueueMessagesBatchResponse)
        elif kind == 2:
            request.action = "QueuesUpstream"
            upstream = pb_bytes(1, b"up") + pb_bytes(2, self.kubemq_message(request))
            code, reply = self.kubemq_stream("QueuesUpstream", upstream, kubemq_pb2.QueuesUpstreamResponse)
        elif kind == 3:
            request.action = "QueuesDownstream Get"
            fuzzed = rng.choice(["ClientID", "Channel"])
            x = arbitrary(rng)
            request.inputs[fuzzed] = x
            self.kubemq_send_raw(pb_bytes(2, b"fuzz") + pb_bytes(3, b"fz-kmq") + pb_bytes(5, b"to pull"))
            # Get (1), one item, no wait, auto-acknowledged: no transaction left open when the stream ends.
            downstream = (pb_bytes(1, b"down") + pb_bytes(2, x if fuzzed == "ClientID" else b"fuzz") + pb_int(3, 1)
                          + pb_bytes(4, x if fuzzed == "Channel" else b"fz-kmq") + pb_int(5, 1) + pb_int(6, 100)
                          + pb_int(7, 1))
            code, reply = self.kubemq_stream("QueuesDownstream", downstream, kubemq_pb2.QueuesDownstreamResponse)
        else:
            request.action = "ReceiveQueueMessages"
            fuzzed = rng.choice(["ClientID", "Channel"])
            x = arbitrary(rng)
            request.inputs[fuzzed] = x
            # A receive writes its delivery (the client id in the delivery history): give it a message.
            self.kubemq_send_raw(pb_bytes(2, b"fuzz") + pb_bytes(3, b"fz-kmq") + pb_bytes(5, b"to receive"))
            payload = (pb_bytes(1, b"r") + pb_bytes(2, x if fuzzed == "ClientID" else b"fuzz")
                       + pb_bytes(3, x if fuzzed == "Channel" else b"fz-kmq") + pb_int(4, 1))
            code, reply = self.kubemq_call("ReceiveQueueMessages", payload, kubemq_pb2.ReceiveQueueMessagesResponse)
        if code != "OK":
            text = str(reply).encode("utf-8", "replace")
            answer = Answer(f"gRPC {code}", text)
            if code == "INTERNAL" and not text.startswith(b"failed to decode Protobuf message"):
                answer.failed = f"gRPC INTERNAL: {text[:300]!r}"
            elif code == "DEADLINE_EXCEEDED":
                answer.failed = f"no answer within {REQUEST_TIMEOUT_S} s"
            elif code in ("UNKNOWN", "UNAVAILABLE", "DATA_LOSS"):
                answer.failed = f"gRPC {code}: {text[:300]!r}"
            return answer
        errors = []
        if hasattr(reply, "Results"):
            errors = [r.Error for r in reply.Results if r.IsError]
        elif reply.IsError:
            errors = [reply.Error]
        text = " | ".join(errors).encode("utf-8", "replace")
        answer = Answer("gRPC OK" + (" (in-band error)" if errors else ""), text)
        bad = [e for e in errors if re.match(r"Error 5\d\d", e)]
        if bad:
            answer.failed = f"in-band {bad[0][:300]!r}"
        return answer

    # ---- admin API ----

    def admin_call(self, method: str, target: bytes, body: bytes | None) -> Answer:
        headers = [(b"Content-Type", b"application/json")] if body is not None else []
        status, reply = raw_http(self.node.admin_port, method, target, headers, body or b"")
        return http_answer(status, reply)

    def admin(self, request: Request) -> Answer:
        rng = self.rng
        request.front = "admin"
        x = arbitrary(rng)
        kind = rng.randrange(6)
        if kind == 0:
            request.action = "POST /api/v1/queues"
            if rng.random() < 0.35:
                request.inputs["namespace"] = x
                doc = {"namespace": x, "name": legal(rng, 4, 12)}
            else:
                request.inputs["name"] = x
                doc = {"name": x}
            doc["fifo"] = rng.random() < 0.3
            return self.admin_call("POST", b"/api/v1/queues", to_json(doc, rng))
        if kind == 1:
            request.action = "POST /api/v1/queues/apply"
            entry: dict = {"name": b"fz-apply-" + legal(rng, 2, 4)}
            place = rng.choice(["name", "namespace", "tag", "metadata", "dead_letter"])
            request.inputs[place] = x
            if place in ("name", "namespace"):
                entry[place] = x
            elif place == "tag":
                entry["tags"] = {x: arbitrary(rng)}
            elif place == "metadata":
                entry["metadata"] = {x: arbitrary(rng)}
            else:
                entry["dead_letter"] = {"queue": x, "max_receive_count": 3}
            return self.admin_call("POST", b"/api/v1/queues/apply", to_json({"queues": [entry]}, rng))
        if kind == 2:
            request.action = "POST /api/v1/queues/{ns}/{queue}/messages"
            place = rng.choice(["group", "dedup_id", "attribute name", "attribute type", "body"])
            request.inputs[place] = x
            message: dict = {"body": b"body", "group": b"g", "dedup_id": uuid.uuid4().hex.encode()}
            if place in ("group", "dedup_id", "body"):
                message[place] = x
            elif place == "attribute name":
                message["attributes"] = {x: {"data_type": b"String", "string_value": b"v"}}
            else:
                message["attributes"] = {b"a": {"data_type": x, "string_value": b"v"}}
            return self.admin_call("POST", b"/api/v1/queues/default/fz-fifo.fifo/messages",
                                   to_json({"messages": [message]}, rng))
        if kind == 3:
            request.action = "POST /api/v1/queues/{ns}/{queue}/messages (path)"
            place = rng.choice(["namespace", "queue"])
            request.inputs[f"{place} in the path"] = x
            ns, queue = (x, b"fz-std") if place == "namespace" else (b"default", x)
            target = b"/api/v1/queues/" + path_segment(ns, rng) + b"/" + path_segment(queue, rng) + b"/messages"
            return self.admin_call("POST", target, b'{"messages":[{"body":"b"}]}')
        if kind == 4:
            request.action = "POST /api/v1/queues/{ns}/{queue}/redrive"
            place = rng.choice(["namespace", "name"])
            request.inputs[f"destination {place}"] = x
            to = {"namespace": x, "name": b"fz-std"} if place == "namespace" else {"namespace": b"default", "name": x}
            return self.admin_call("POST", b"/api/v1/queues/default/fz-std/redrive", to_json({"to": to}, rng))
        # A standard queue's send with the FIFO fields (what an import of a FIFO export into it sends).
        request.action = "POST /api/v1/queues/{ns}/{queue}/messages (standard)"
        request.inputs["group"] = x
        return self.admin_call("POST", b"/api/v1/queues/default/fz-std/messages",
                               to_json({"messages": [{"body": b"b", "group": x}]}, rng))


# ---- the test --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg():
    server = PgServer("pg-bytes").init().start()
    yield server
    server.destroy()


def test_no_request_whatever_its_bytes_fails_the_postgresql_store(veil_path, pg, tmp_path):
    seed = int(os.environ.get("VEIL_BYTES_SEED") or random.SystemRandom().randrange(2**32))
    seconds = float(os.environ.get("VEIL_BYTES_SECONDS") or 0) or None
    count = int(os.environ.get("VEIL_BYTES_REQUESTS") or 0) or (None if seconds else REQUESTS_DEFAULT)
    keep_going = os.environ.get("VEIL_BYTES_KEEP_GOING", "") not in ("", "0")
    print(f"\nstore-bytes: VEIL_BYTES_SEED={seed} VEIL_BYTES_REQUESTS={count or ''} "
          f"VEIL_BYTES_SECONDS={seconds or ''}", flush=True)
    config = tmp_path / "veil.toml"
    config.write_text(CONFIG)
    cluster = Cluster(pg, tmp_path, size=1, partitions=PARTITIONS, lease_ttl_ms=LEASE_TTL_MS,
                      extra_args=["--config", str(config)])
    node = cluster.nodes[0]
    cluster.start()
    fuzzer = None
    try:
        fuzzer = StoreBytesFuzzer(node, pg, cluster.schema, random.Random(seed))
        fuzzer.setup()
        started = time.monotonic()
        sent = fuzzer.run(count, seconds, keep_going, seed)
        elapsed = time.monotonic() - started
        print(f"store-bytes: {sent} requests in {elapsed:.1f} s, {len(fuzzer.failures)} failures, "
              f"{fuzzer.load.round_trips} control round trips beside them (VEIL_BYTES_SEED={seed})", flush=True)
        assert not fuzzer.failures, (f"VEIL_BYTES_SEED={seed}: {len(fuzzer.failures)} requests broke the store "
                                     "rule:\n" + "\n".join(fuzzer.failures))
        assert node.running(), node.log_tail()
        node.stop_cleanly()
    finally:
        if fuzzer is not None:
            if hasattr(fuzzer, "load"):
                fuzzer.load.finish()
            fuzzer.grpc.close()
        cluster.kill_all()
