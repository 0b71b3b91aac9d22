"""One permission model under all three protocols (docs/security.md "One permission model"): each protocol's
identities, through that protocol's official SDK, reach exactly the operations their permissions allow on one
queue that all three protocols share, and every refusal is the protocol's own.

Per protocol, one identity holds each of a few permission sets, and the owner holds all five:
- SQS: access keys from `[[sqs.credentials]]` with `grants` (send; receive + delete; peek) and the
  development credential `test` (the account's owner);
- Azure: queue SAS tokens (`a` = send; `p` = receive + delete; `r` = peek) and the account key;
- KubeMQ: JWTs under KubeMQ's policy (Write = send + admin; Read = receive + delete + peek) and a static
  token (unrestricted).

For each identity the test tries the five operations (send, receive, delete, peek, admin) and compares the set
it reached with the set its permissions name. The queue is created through SQS and its messages cross
protocols: what the SQS owner sends is what the Azure and KubeMQ identities receive and delete.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta, timezone

import boto3
import grpc
import jwt
import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueClient, QueueSasPermissions, generate_queue_sas
from botocore.config import Config
from botocore.exceptions import ClientError
from kubemq.queues import QueueMessage

from helpers import AZURE_ACCOUNT, AZURE_KEY, DEFAULT_REGION, VeilServer, kubemq_client, make_client

ALL = {"send", "receive", "delete", "peek", "admin"}
JWT_SECRET = "veil-e2e-matrix-secret-of-32-bytes-or-more"
STATIC_TOKEN = "matrix-static-token"
KUBEMQ_DENIED = "Error 412: access denied to resource"

SQS_IDENTITIES = {
    # access key: (permissions in the config file, the operations they reach)
    "SENDER": (["send"], {"send"}),
    "WORKER": (["receive", "delete"], {"receive", "delete"}),
    "OBSERVER": (["peek"], {"peek"}),
}
AZURE_IDENTITIES = {
    # SAS permission letter: the operations it reaches
    "a": {"send"},
    "p": {"receive", "delete"},
    "r": {"peek"},
}
KUBEMQ_POLICY = [
    {"ClientID": "^writer$", "Channel": "^matrix-", "Queues": True, "Read": False, "Write": True},
    {"ClientID": "^reader$", "Channel": "^matrix-", "Queues": True, "Read": True, "Write": False},
]
KUBEMQ_IDENTITIES = {
    "writer": {"send", "admin"},
    "reader": {"receive", "delete", "peek"},
}


@pytest.fixture(scope="module")
def server(veil_path, tmp_path_factory):
    base = tmp_path_factory.mktemp("matrix")
    (base / "policy.json").write_text(json.dumps(KUBEMQ_POLICY))
    credentials = "".join(
        "[[sqs.credentials]]\n"
        f'access_key = "{key}"\n'
        f'secret_key = "{key.lower()}-secret"\n'
        'account_id = "000000000000"\n'
        f"grants = [{{ queues = \"matrix-*\", permissions = {json.dumps(permissions)} }}]\n"
        for key, (permissions, _) in SQS_IDENTITIES.items()
    )
    (base / "veil.toml").write_text(
        credentials
        + "[kubemq]\n"
        f'auth_tokens = ["{STATIC_TOKEN}"]\n'
        f'auth_jwt_key = "{JWT_SECRET}"\n'
        'auth_jwt_signature_type = "HS256"\n'
        f'auth_policy_file = "{base / "policy.json"}"\n'
    )
    server = VeilServer(base / "data", extra_args=["--config", str(base / "veil.toml")], log_dir=base).start()
    yield server
    assert server.stop() == 0, server.log_tail()


@pytest.fixture
def queue(server):
    """A fresh queue of the default namespace, created by the SQS owner, with its URL."""
    owner = make_client(server.endpoint)
    name = f"matrix-{uuid.uuid4().hex[:10]}"
    url = owner.create_queue(QueueName=name)["QueueUrl"]
    return owner, name, url


def sqs_as(server, access_key: str):
    return boto3.client(
        "sqs", endpoint_url=server.endpoint, region_name=DEFAULT_REGION,
        aws_access_key_id=access_key, aws_secret_access_key=f"{access_key.lower()}-secret",
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )


class RefusedInBand(Exception):
    """A refusal a protocol answers inside a successful response (KubeMQ's `IsError`/`Error`)."""


class NotAttempted(Exception):
    """An operation that needs what an earlier refused one would have given (an ack without a delivery)."""


def reach(operations: dict, check_refusal) -> set[str]:
    """Runs the operations in order and returns the names of those that succeeded; every other one must have
    failed with the protocol's own refusal, which `check_refusal(name, error)` asserts."""
    reached = set()
    for name, operation in operations.items():
        try:
            operation()
        except NotAttempted:
            continue
        except Exception as error:  # noqa: BLE001 - each protocol's check_refusal decides
            check_refusal(name, error)
            continue
        reached.add(name)
    return reached


def sqs_reach(owner, url: str, client) -> set[str]:
    """The operations `client` may do on the queue; any refusal must be SQS's 403 AccessDenied."""
    owner.send_message(QueueUrl=url, MessageBody="seed")
    held = owner.receive_message(QueueUrl=url, VisibilityTimeout=30, WaitTimeSeconds=1)["Messages"][0]
    owner.send_message(QueueUrl=url, MessageBody="to receive")
    operations = {
        "send": lambda: client.send_message(QueueUrl=url, MessageBody="m"),
        "receive": lambda: client.receive_message(QueueUrl=url, VisibilityTimeout=0, WaitTimeSeconds=0),
        "delete": lambda: client.change_message_visibility(
            QueueUrl=url, ReceiptHandle=held["ReceiptHandle"], VisibilityTimeout=30),
        "peek": lambda: client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]),
        "admin": lambda: client.tag_queue(QueueUrl=url, Tags={"matrix": "yes"}),
    }

    def check_refusal(name: str, e: Exception) -> None:
        assert isinstance(e, ClientError), (name, e)
        error = e.response["Error"]
        assert (error["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]) == ("AccessDenied", 403), (
            name, error)
        assert "is not authorized to perform: sqs:" in error["Message"], error

    return reach(operations, check_refusal)


@pytest.mark.parametrize("access_key", sorted(SQS_IDENTITIES))
def test_sqs_credentials_reach_exactly_their_granted_operations(server, queue, access_key):
    owner, _, url = queue
    assert sqs_reach(owner, url, sqs_as(server, access_key)) == SQS_IDENTITIES[access_key][1]


def test_the_sqs_owner_reaches_every_operation(server, queue):
    owner, _, url = queue
    assert sqs_reach(owner, url, owner) == ALL


def azure_reach(server, owner, url: str, name: str, client: QueueClient) -> set[str]:
    """The operations `client` may do on the queue; any refusal must be Azure's 403
    AuthorizationPermissionMismatch. The messages come from the SQS owner."""
    owner.send_message(QueueUrl=url, MessageBody="seed")
    keyed = QueueClient(server.azure_endpoint, name, credential=AZURE_KEY)
    held = keyed.receive_message(visibility_timeout=30)
    assert held is not None
    operations = {
        "send": lambda: client.send_message("m"),
        "receive": lambda: client.receive_message(visibility_timeout=1),
        "delete": lambda: client.delete_message(held.id, pop_receipt=held.pop_receipt),
        "peek": lambda: client.peek_messages(),
        "admin": lambda: client.set_queue_metadata({"matrix": "yes"}),
    }

    def check_refusal(name: str, e: Exception) -> None:
        assert isinstance(e, HttpResponseError), (name, e)
        assert (e.status_code, e.error_code) == (403, "AuthorizationPermissionMismatch"), (name, e)

    return reach(operations, check_refusal)


@pytest.mark.parametrize("letter", sorted(AZURE_IDENTITIES))
def test_azure_sas_tokens_reach_exactly_their_permissions(server, queue, letter):
    owner, name, url = queue
    sas = generate_queue_sas(
        AZURE_ACCOUNT, name, AZURE_KEY, permission=QueueSasPermissions.from_string(letter),
        expiry=datetime.now(timezone.utc) + timedelta(hours=1),
    )
    client = QueueClient(server.azure_endpoint, name, credential=sas)
    assert azure_reach(server, owner, url, name, client) == AZURE_IDENTITIES[letter]


def test_the_azure_account_key_reaches_every_operation(server, queue):
    owner, name, url = queue
    client = QueueClient(server.azure_endpoint, name, credential=AZURE_KEY)
    assert azure_reach(server, owner, url, name, client) == ALL


def kubemq_token(client_id: str) -> str:
    return jwt.encode({"exp": int(time.time()) + 300}, JWT_SECRET, algorithm="HS256")


def kubemq_reach(owner, url: str, name: str, client) -> set[str]:
    """The operations `client` may do on the channel; any refusal must carry KubeMQ's access-denied text, in-band
    (`IsError`/`Error`) or as the RPC's error, whichever KubeMQ uses for that call. A delivery is settled
    (`delete`) by acking what the same client received, as KubeMQ's downstream does."""
    owner.send_message(QueueUrl=url, MessageBody="seed")
    received = []

    def in_band(result):
        if getattr(result, "is_error", False):
            raise RefusedInBand(result.error)
        return result

    def receive():
        response = in_band(client.receive_queue_messages(channel=name, max_messages=1, wait_timeout_in_seconds=1))
        assert response.messages, "the seed sent through SQS is there to receive"
        received.append(response.messages[0])

    def delete():
        if not received:
            raise NotAttempted("no delivery to ack: the receive was refused")
        received[0].ack()

    operations = {
        "send": lambda: in_band(client.send_queue_message(QueueMessage(channel=name, body=b"m"))),
        "peek": lambda: in_band(
            client.peek_queue_messages(channel=name, max_messages=1, wait_timeout_in_seconds=1)),
        "receive": receive,
        "delete": delete,
        "admin": lambda: client.ack_all_queue_messages(name),
    }

    def check_refusal(operation_name: str, e: Exception) -> None:
        # The text comes in-band, as the RPC's error, or inside the SDK's own error type (AckAll).
        text = e.details() if isinstance(e, grpc.RpcError) else str(e)
        assert KUBEMQ_DENIED in text, (operation_name, text)

    return reach(operations, check_refusal)


@pytest.mark.parametrize("client_id", sorted(KUBEMQ_IDENTITIES))
def test_kubemq_tokens_reach_exactly_their_policy_rules(server, queue, client_id):
    owner, name, url = queue
    client = kubemq_client(server, client_id=client_id, auth_token=kubemq_token(client_id))
    try:
        assert kubemq_reach(owner, url, name, client) == KUBEMQ_IDENTITIES[client_id]
    finally:
        client.close()


def test_the_kubemq_static_token_reaches_every_operation(server, queue):
    owner, name, url = queue
    client = kubemq_client(server, client_id="anyone", auth_token=STATIC_TOKEN)
    try:
        assert kubemq_reach(owner, url, name, client) == ALL
    finally:
        client.close()


def test_a_message_sent_by_an_sqs_sender_is_received_by_an_azure_processor_and_a_kubemq_reader(server, queue):
    _, name, url = queue
    sender = sqs_as(server, "SENDER")
    sender.send_message(QueueUrl=url, MessageBody="from sqs sender")
    sender.send_message(QueueUrl=url, MessageBody="from sqs sender")
    processor = QueueClient(server.azure_endpoint, name, credential=generate_queue_sas(
        AZURE_ACCOUNT, name, AZURE_KEY, permission=QueueSasPermissions(process=True),
        expiry=datetime.now(timezone.utc) + timedelta(hours=1)))
    got = processor.receive_message(visibility_timeout=30)
    assert got is not None and got.content == "from sqs sender"
    processor.delete_message(got)
    reader = kubemq_client(server, client_id="reader", auth_token=kubemq_token("reader"))
    try:
        received = reader.receive_queue_messages(channel=name, max_messages=1, wait_timeout_in_seconds=2)
        assert not received.is_error, received.error
        assert [m.body for m in received.messages] == [b"from sqs sender"]
        received.messages[0].ack()
        # The SDK's ack goes out on the downstream without waiting for its answer: give it its round trip.
        owner = make_client(server.endpoint)
        deadline = time.monotonic() + 2
        while True:
            attributes = owner.get_queue_attributes(QueueUrl=url, AttributeNames=[
                "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
            if attributes == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}:
                break
            assert time.monotonic() < deadline, attributes
            time.sleep(0.05)
    finally:
        reader.close()
