"""Seeds the fuzz corpora with what the real clients send (docs/reliability.md, "Fuzzing").

It starts the real `veil` binary and drives it with the real SDKs doing their typical operations, recording the
bytes on the way:

- boto3 (SQS JSON protocol, and the Query protocol through botocore's own Query serializer, selected by a copy
  of the SQS model whose protocol is `query`) and a boto3 presigned URL, and the azure-storage-queue SDK (Shared
  Key, queue SAS and account SAS), through a recording TCP proxy in front of Veil's HTTP ports: every request,
  byte for byte as the client wrote it, becomes one file of `corpus/sqs_json`, `corpus/sqs_query`,
  `corpus/sqs_sigv4`, `corpus/azure_rest` and `corpus/azure_auth`;
- the kubemq SDK (unary send, batch, upstream stream, pull, peek, downstream, ack-all, channel management):
  every request message as the SDK serialized it for gRPC (its stubs' request serializers are wrapped) becomes a
  `[kind][length u16 LE][protobuf]` file of `corpus/kubemq`, and the whole session one more (a script);
- the receipts the clients sent back (SQS ReceiptHandle, Azure popreceipt) seed `corpus/receipt` and
  `corpus/pop_receipt`;
- after a kill -9, Veil's write-ahead log segment (its written part) seeds `corpus/store_wal`, and each of its
  records' bodies (postcard `Vec<StoreOp>`) `corpus/store_values`.

Files are named `seed-<sha1 prefix>`: re-running the script adds what changed and rewrites nothing else.
Usage: .venv/bin/python fuzz/seeds/capture.py [--veil target/release/veil]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import requests

FUZZ = Path(__file__).resolve().parents[1]
REPO = FUZZ.parent
CORPUS = FUZZ / "corpus"
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
WAL_MAGIC = b"VEILWAL1"

# The kubemq target's request kinds (fuzz/fuzz_targets/kubemq.rs).
KUBEMQ_KINDS = {
    "QueueMessage": 0,
    "QueueMessagesBatchRequest": 1,
    "ReceiveQueueMessagesRequest": 2,
    "AckAllQueueMessagesRequest": 3,
    "QueuesInfoRequest": 4,
    "Request": 5,
    "QueuesUpstreamRequest": 6,
    "QueuesDownstreamRequest": 7,
}


def save(target: str, data: bytes) -> None:
    directory = CORPUS / target
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"seed-{hashlib.sha1(data).hexdigest()[:16]}").write_bytes(data)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RecordingProxy:
    """A TCP proxy that forwards both ways and splits what clients send into HTTP/1.1 requests (by
    Content-Length, which every client here sends), handing each one, as sent, to `record`."""

    def __init__(self, upstream_port: int, record):
        self.upstream_port = upstream_port
        self.record = record
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self.pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self.pipe, args=(upstream, client, False), daemon=True).start()

    def pipe(self, source: socket.socket, sink: socket.socket, requests_flow: bool) -> None:
        pending = b""
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
                if requests_flow:
                    pending = self.split(pending + chunk)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def split(self, pending: bytes) -> bytes:
        while (end := pending.find(b"\r\n\r\n")) >= 0:
            head = pending[: end + 4]
            match = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
            length = int(match.group(1)) if match else 0
            if len(pending) < len(head) + length:
                break
            self.record(pending[: len(head) + length])
            pending = pending[len(head) + length :]
        return pending


def start_veil(veil: str, data_dir: Path) -> tuple[subprocess.Popen, dict]:
    ports = {name: free_port() for name in ("sqs", "azure", "kubemq", "admin")}
    proc = subprocess.Popen(
        [
            veil, "serve", "--data-dir", str(data_dir),
            "--sqs-listen", f"127.0.0.1:{ports['sqs']}",
            "--azure-listen", f"127.0.0.1:{ports['azure']}",
            "--kubemq-listen", f"127.0.0.1:{ports['kubemq']}",
            "--admin-listen", f"127.0.0.1:{ports['admin']}",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    for port in ports.values():
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    sys.exit(f"veil did not start (port {port})")
                time.sleep(0.05)
    return proc, ports


def record_sqs(request: bytes) -> None:
    head = request.split(b"\r\n\r\n", 1)[0].lower()
    save("sqs_json" if b"\r\nx-amz-target:" in head else "sqs_query", request)
    if b"authorization: aws4-hmac-sha256" in head or b"x-amz-signature=" in head:
        save("sqs_sigv4", request)
    for handle in re.findall(rb'"ReceiptHandle":\s*"([^"]+)"', request):
        save("receipt", handle)
    for handle in re.findall(rb"ReceiptHandle=([^&\s]+)", request):
        save("receipt", urllib.parse.unquote_to_bytes(handle))


def record_azure(request: bytes) -> None:
    save("azure_rest", request)
    head = request.split(b"\r\n\r\n", 1)[0]
    if re.search(rb"(?im)^authorization:", head) or b"sig=" in head.split(b"\r\n", 1)[0]:
        save("azure_auth", request)
    for receipt in re.findall(rb"popreceipt=([^&\s]+)", head):
        save("pop_receipt", urllib.parse.unquote_to_bytes(receipt))


def query_model_dir() -> Path:
    """A botocore data dir whose SQS model speaks the Query protocol (AWS's original one for SQS)."""
    import botocore

    source = Path(botocore.__file__).parent / "data" / "sqs" / "2012-11-05" / "service-2.json.gz"
    model = json.loads(gzip.decompress(source.read_bytes()))
    model["metadata"]["protocol"] = "query"
    model["metadata"]["protocols"] = ["query"]
    for key in ("jsonVersion", "targetPrefix", "awsQueryCompatible"):
        model["metadata"].pop(key, None)
    directory = Path(tempfile.mkdtemp(prefix="veil-query-model-"))
    target = directory / "sqs" / "2012-11-05"
    target.mkdir(parents=True)
    (target / "service-2.json").write_text(json.dumps(model))
    return directory


def sqs_session(endpoint: str, query: bool) -> None:
    import boto3
    import botocore.session
    from botocore.config import Config

    session = botocore.session.get_session()
    if query:
        session.get_component("data_loader").search_paths.insert(0, str(query_model_dir()))
    sqs = boto3.Session(botocore_session=session).client(
        "sqs", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="test", aws_secret_access_key="test",
        config=Config(retries={"total_max_attempts": 1}),
    )
    # Answers in JSON to a Query client cannot be parsed: the request is what matters here.
    def quietly(call, **kwargs):
        try:
            return call(**kwargs)
        except Exception:  # noqa: BLE001 - a seed run keeps going
            return None

    json_urls = {}
    for name, attributes in (
        ("seed-std", {"VisibilityTimeout": "30", "MessageRetentionPeriod": "3600"}),
        ("seed-fifo.fifo", {"FifoQueue": "true", "ContentBasedDeduplication": "true"}),
    ):
        made = quietly(sqs.create_queue, QueueName=name, Attributes=attributes, tags={"team": "fuzz"})
        json_urls[name] = (made or {}).get("QueueUrl", f"{endpoint}/000000000000/{name}")
    url, fifo = json_urls["seed-std"], json_urls["seed-fifo.fifo"]
    quietly(sqs.get_queue_url, QueueName="seed-std")
    quietly(sqs.list_queues, QueueNamePrefix="seed", MaxResults=10)
    quietly(sqs.get_queue_attributes, QueueUrl=url, AttributeNames=["All"])
    quietly(sqs.set_queue_attributes, QueueUrl=url, Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:seed-fifo.fifo",
                                     "maxReceiveCount": "3"}),
        "DelaySeconds": "0",
    })
    quietly(sqs.send_message, QueueUrl=url, MessageBody="hello <&> \u00e9\r\n", DelaySeconds=0,
            MessageAttributes={
                "kind": {"DataType": "String", "StringValue": "greeting"},
                "n": {"DataType": "Number", "StringValue": "42"},
                "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
            },
            MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988"}})
    quietly(sqs.send_message_batch, QueueUrl=url, Entries=[
        {"Id": f"m{i}", "MessageBody": f"body {i}", "DelaySeconds": i} for i in range(3)
    ])
    quietly(sqs.send_message, QueueUrl=fifo, MessageBody="ordered", MessageGroupId="g1",
            MessageDeduplicationId="d1")
    got = quietly(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                  VisibilityTimeout=5, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"],
                  ReceiveRequestAttemptId="attempt-1")
    messages = (got or {}).get("Messages", [])
    handles = [m["ReceiptHandle"] for m in messages] or ["not-a-real-receipt"]
    quietly(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handles[0], VisibilityTimeout=10)
    quietly(sqs.change_message_visibility_batch, QueueUrl=url, Entries=[
        {"Id": f"c{i}", "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in enumerate(handles)
    ])
    quietly(sqs.delete_message, QueueUrl=url, ReceiptHandle=handles[0])
    quietly(sqs.delete_message_batch, QueueUrl=url, Entries=[
        {"Id": f"d{i}", "ReceiptHandle": h} for i, h in enumerate(handles)
    ])
    quietly(sqs.tag_queue, QueueUrl=url, Tags={"env": "seed"})
    quietly(sqs.list_queue_tags, QueueUrl=url)
    quietly(sqs.untag_queue, QueueUrl=url, TagKeys=["env"])
    quietly(sqs.list_dead_letter_source_queues, QueueUrl=fifo)
    quietly(sqs.add_permission, QueueUrl=url, Label="p1", AWSAccountIds=["000000000000"], Actions=["SendMessage"])
    quietly(sqs.remove_permission, QueueUrl=url, Label="p1")
    quietly(sqs.start_message_move_task, SourceArn="arn:aws:sqs:us-east-1:000000000000:seed-fifo.fifo",
            MaxNumberOfMessagesPerSecond=10)
    quietly(sqs.list_message_move_tasks, SourceArn="arn:aws:sqs:us-east-1:000000000000:seed-fifo.fifo")
    quietly(sqs.cancel_message_move_task, TaskHandle="eyJ0YXNrIjoibm9uZSJ9")
    quietly(sqs.purge_queue, QueueUrl=url)
    if not query:
        # A presigned URL: the signature in the query string (SigV4's other carrier).
        presigned = sqs.generate_presigned_url("get_queue_attributes", Params={"QueueUrl": url,
                                                                               "AttributeNames": ["All"]})
        requests.get(presigned, timeout=5)
    quietly(sqs.delete_queue, QueueUrl=url)


def azure_session(endpoint: str) -> None:
    from datetime import datetime, timedelta, timezone

    from azure.core.exceptions import AzureError
    from azure.storage.queue import (AccessPolicy, AccountSasPermissions, CorsRule, QueueSasPermissions,
                                     QueueServiceClient, ResourceTypes, generate_account_sas,
                                     generate_queue_sas, Metrics, RetentionPolicy, QueueAnalyticsLogging)

    def quietly(call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except AzureError:
            return None

    connection = (f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};"
                  f"QueueEndpoint={endpoint}/{AZURE_ACCOUNT};")
    service = QueueServiceClient.from_connection_string(connection)
    quietly(service.set_service_properties,
            analytics_logging=QueueAnalyticsLogging(read=True, retention_policy=RetentionPolicy(enabled=True, days=2)),
            hour_metrics=Metrics(enabled=True, include_apis=True, retention_policy=RetentionPolicy(enabled=True, days=3)),
            cors=[CorsRule(["https://example.com"], ["GET", "PUT"], allowed_headers=["x-ms-meta-*"],
                           exposed_headers=["x-ms-request-id"], max_age_in_seconds=60)])
    quietly(service.get_service_properties)
    quietly(service.get_service_stats)
    queue = service.get_queue_client("seed-queue")
    quietly(queue.create_queue, metadata={"team": "fuzz", "kind": "seed"})
    quietly(queue.set_queue_metadata, metadata={"changed": "yes"})
    quietly(queue.get_queue_properties)
    list(quietly(service.list_queues, name_starts_with="seed", include_metadata=True) or [])
    now = datetime.now(timezone.utc)
    quietly(queue.set_queue_access_policy, signed_identifiers={
        "read-only": AccessPolicy(permission=QueueSasPermissions(read=True, process=True),
                                  start=now - timedelta(minutes=5), expiry=now + timedelta(hours=1)),
    })
    quietly(queue.get_queue_access_policy)
    quietly(queue.send_message, "hello <&> \u00e9", visibility_timeout=0, time_to_live=3600)
    quietly(queue.send_message, "second", time_to_live=-1)
    quietly(queue.peek_messages, max_messages=5)
    received = list(quietly(queue.receive_messages, messages_per_page=5, visibility_timeout=30) or [])
    for message in received[:1]:
        updated = quietly(queue.update_message, message, pop_receipt=message.pop_receipt, content="updated",
                          visibility_timeout=5)
        if updated is not None:
            quietly(queue.delete_message, message.id, updated.pop_receipt)
    quietly(queue.clear_messages)
    # The two SAS kinds, as the SDK writes them into the query string.
    queue_sas = generate_queue_sas(AZURE_ACCOUNT, "seed-queue", AZURE_KEY,
                                   permission=QueueSasPermissions(read=True, add=True, process=True),
                                   expiry=now + timedelta(hours=1), start=now - timedelta(minutes=5),
                                   ip="127.0.0.1", protocol="https,http")
    by_queue_sas = QueueServiceClient(f"{endpoint}/{AZURE_ACCOUNT}", credential=queue_sas)
    quietly(by_queue_sas.get_queue_client("seed-queue").send_message, "via queue sas")
    quietly(by_queue_sas.get_queue_client("seed-queue").peek_messages)
    policy_sas = generate_queue_sas(AZURE_ACCOUNT, "seed-queue", AZURE_KEY, policy_id="read-only")
    quietly(QueueServiceClient(f"{endpoint}/{AZURE_ACCOUNT}", credential=policy_sas)
            .get_queue_client("seed-queue").peek_messages)
    account_sas = generate_account_sas(AZURE_ACCOUNT, AZURE_KEY,
                                       resource_types=ResourceTypes(service=True, container=True, object=True),
                                       permission=AccountSasPermissions(read=True, write=True, list=True,
                                                                        add=True, create=True, process=True),
                                       expiry=now + timedelta(hours=1))
    by_account_sas = QueueServiceClient(f"{endpoint}/{AZURE_ACCOUNT}", credential=account_sas)
    list(quietly(by_account_sas.list_queues) or [])
    quietly(by_account_sas.get_queue_client("seed-queue").receive_message)
    quietly(queue.delete_queue)


def kubemq_session(address: str) -> None:
    from kubemq.grpc import kubemq_pb2, kubemq_pb2_grpc

    recorded: list[tuple[int, bytes]] = []
    originals = {}
    for name, kind in KUBEMQ_KINDS.items():
        cls = getattr(kubemq_pb2, name, None)
        if cls is None:  # this SDK's proto lacks it (QueuesInfo)
            continue
        originals[name] = cls.SerializeToString

        def serialize(message, *args, _original=originals[name], _kind=kind, **kwargs):
            data = _original(message, *args, **kwargs)
            recorded.append((_kind, data))
            return data

        cls.SerializeToString = serialize
    # The stubs read the serializers when they are made, so the SDK is imported only now.
    import importlib

    importlib.reload(kubemq_pb2_grpc)
    from kubemq.queues import Client, QueueMessage

    client = Client(address=address, client_id="seed-client")
    try:
        client.create_queues_channel("seed-kmq")
        client.list_queues_channels("seed")
        client.send_queue_message(QueueMessage(channel="seed-kmq", body=b"hello", metadata="greeting",
                                               tags={"kind": "seed"}))
        client.send_queue_message_simple(QueueMessage(channel="seed-kmq", body=b"simple",
                                                      delay_in_seconds=0, expiration_in_seconds=3600))
        client.send_queue_messages_batch([
            QueueMessage(channel="seed-kmq", body=f"m{i}".encode(), max_receive_count=3,
                         max_receive_queue="seed-kmq-dlq") for i in range(3)
        ])
        pulled = client.receive_queue_messages(channel="seed-kmq", max_messages=2, wait_timeout_in_seconds=1)
        for message in pulled.messages[:1]:
            message.ack()
        for message in pulled.messages[1:]:
            message.re_queue("seed-kmq-other")
        client.peek_queue_messages(channel="seed-kmq", max_messages=5, wait_timeout_in_seconds=1)
        client.ack_all_queue_messages("seed-kmq", wait_time_seconds=1)
        client.delete_queues_channel("seed-kmq")
    finally:
        client.close()
        for name, original in originals.items():
            setattr(getattr(kubemq_pb2, name), "SerializeToString", original)
    script = b""
    for kind, data in recorded:
        framed = bytes([kind]) + struct.pack("<H", min(len(data), 0xFFFF)) + data[:0xFFFF]
        save("kubemq", framed)
        script += framed
    save("kubemq", script)


def wal_seeds(data_dir: Path) -> None:
    for segment in sorted(data_dir.glob("wal-*.log")):
        data = segment.read_bytes().rstrip(b"\x00")
        if not data.startswith(WAL_MAGIC):
            continue
        # The store_wal target puts the magic in front itself when its first byte is odd.
        save("store_wal", b"\x01" + data[len(WAL_MAGIC):])
        at = len(WAL_MAGIC)
        while at + 8 <= len(data):
            length, _crc = struct.unpack_from("<II", data, at)
            body = data[at + 8 : at + 8 + length]
            if length == 0 or len(body) < length:
                break
            save("store_values", b"\x09" + body)  # kind 9: a Vec<StoreOp>, as a log record holds
            at += 8 + length


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--veil", default=os.environ.get("VEIL_BIN", str(REPO / "target" / "release" / "veil")))
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="veil-seed-"))
    proc, ports = start_veil(args.veil, data_dir)
    try:
        sqs_proxy = RecordingProxy(ports["sqs"], record_sqs)
        azure_proxy = RecordingProxy(ports["azure"], record_azure)
        sqs_session(f"http://127.0.0.1:{sqs_proxy.port}", query=False)
        sqs_session(f"http://127.0.0.1:{sqs_proxy.port}", query=True)
        azure_session(f"http://127.0.0.1:{azure_proxy.port}")
        kubemq_session(f"127.0.0.1:{ports['kubemq']}")
        time.sleep(0.3)  # the proxies' last requests
    finally:
        # kill -9: the log keeps what a crash leaves, which is what recovery reads.
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    wal_seeds(data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)
    for target in sorted(p.name for p in CORPUS.iterdir()):
        print(f"{target}: {len(list((CORPUS / target).glob('seed-*')))} seeds")


if __name__ == "__main__":
    main()
