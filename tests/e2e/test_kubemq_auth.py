"""KubeMQ authentication and authorization (docs/security.md "KubeMQ") with KubeMQ's official Python SDK against
the real `veil` binary: JWTs signed with the configured key, KubeMQ's policy rules (ClientID and Channel
regular expressions, Queues, Read, Write) in a policy file, KubeMQ's refusal texts, and the static token list
beside them.

The policy lets `writer` write to `orders.*` only and `reader` read `orders.*` only; the static token is
unrestricted. Channels are fresh per test (`orders.<hex>`), so tests do not see each other's messages.
"""

from __future__ import annotations

import json
import time
import uuid

import grpc
import jwt
import pytest
from kubemq.queues import QueueMessage

from helpers import VeilServer, kubemq_client

SECRET = "veil-e2e-jwt-secret-of-32-bytes-at-least"
STATIC = "static-token"
POLICY = [
    {"ClientID": "^writer$", "Channel": "^orders\\.", "Queues": True, "Read": False, "Write": True},
    {"ClientID": "^reader$", "Channel": "^orders\\.", "Queues": True, "Read": True, "Write": False},
]
DENIED = "Error 412: access denied to resource"


@pytest.fixture(scope="module")
def server(veil_path, tmp_path_factory):
    base = tmp_path_factory.mktemp("kubemq-auth")
    (base / "policy.json").write_text(json.dumps(POLICY))
    (base / "veil.toml").write_text(
        "[kubemq]\n"
        f'auth_tokens = ["{STATIC}"]\n'
        f'auth_jwt_key = "{SECRET}"\n'
        'auth_jwt_signature_type = "HS256"\n'
        f'auth_policy_file = "{base / "policy.json"}"\n'
    )
    server = VeilServer(base / "data", extra_args=["--config", str(base / "veil.toml")], log_dir=base).start()
    yield server
    assert server.stop() == 0, server.log_tail()


def token(key: str = SECRET, **claims) -> str:
    claims.setdefault("exp", int(time.time()) + 300)
    return jwt.encode(claims, key, algorithm="HS256")


@pytest.fixture
def orders() -> str:
    return f"orders.{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(server):
    made = []

    def make(client_id: str, auth_token: str):
        c = kubemq_client(server, client_id=client_id, auth_token=auth_token)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def test_a_write_rule_lets_its_client_send_to_matching_channels(client, orders):
    writer = client("writer", token())
    result = writer.send_queue_message(QueueMessage(channel=orders, body=b"order"))
    assert not result.is_error, result.error


def test_a_write_rule_does_not_let_its_client_receive(client, orders):
    writer = client("writer", token())
    response = writer.receive_queue_messages(channel=orders, max_messages=1, wait_timeout_in_seconds=1)
    assert response.is_error
    assert DENIED in response.error


def test_a_write_rule_does_not_reach_other_channels(client):
    writer = client("writer", token())
    invoices = f"invoices-{uuid.uuid4().hex[:10]}"
    # Upstream send: the refusal is the message's own in-band result.
    result = writer.send_queue_message(QueueMessage(channel=invoices, body=b"x"))
    assert result.is_error
    assert DENIED in result.error
    # Unary send: KubeMQ returns the refusal as the RPC's error.
    with pytest.raises(grpc.RpcError) as raised:
        writer.send_queue_message_simple(QueueMessage(channel=invoices, body=b"x"))
    assert raised.value.code() == grpc.StatusCode.UNKNOWN
    assert raised.value.details() == DENIED


def test_a_read_rule_lets_its_client_receive_and_ack_what_a_writer_sent(client, orders):
    writer = client("writer", token())
    assert not writer.send_queue_message(QueueMessage(channel=orders, body=b"to-read")).is_error
    reader = client("reader", token())
    response = reader.receive_queue_messages(channel=orders, max_messages=1, wait_timeout_in_seconds=2)
    assert not response.is_error, response.error
    assert [m.body for m in response.messages] == [b"to-read"]
    response.messages[0].ack()
    # Acked: nothing left for anyone, the unrestricted static token included.
    admin = client("anyone", STATIC)
    again = admin.receive_queue_messages(channel=orders, max_messages=1, wait_timeout_in_seconds=1)
    assert not again.is_error, again.error
    assert again.messages == []


def test_a_read_rule_does_not_let_its_client_send(client, orders):
    reader = client("reader", token())
    result = reader.send_queue_message(QueueMessage(channel=orders, body=b"x"))
    assert result.is_error
    assert DENIED in result.error


def test_an_unknown_client_id_is_refused_even_with_a_valid_token(client, orders):
    stranger = client("stranger", token())
    result = stranger.send_queue_message(QueueMessage(channel=orders, body=b"x"))
    assert result.is_error
    assert DENIED in result.error


def test_a_client_id_claim_binds_the_token_to_that_client(client, orders):
    # The token names `reader`; a client presenting it as `writer` gets nothing of writer's rights.
    impostor = client("writer", token(ClientID="reader"))
    result = impostor.send_queue_message(QueueMessage(channel=orders, body=b"x"))
    assert result.is_error
    assert DENIED in result.error


def test_an_expired_token_is_refused_as_unauthenticated(client, orders):
    expired = client("writer", token(exp=int(time.time()) - 60))
    with pytest.raises(grpc.RpcError) as raised:
        expired.send_queue_message_simple(QueueMessage(channel=orders, body=b"x"))
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert raised.value.details() == "Error 421: authentication verification failed, token is expired"


def test_a_token_signed_with_another_key_is_refused_as_unauthenticated(client, orders):
    forged = client("writer", token(key="not-the-secret-but-as-long-as-it-32b"))
    with pytest.raises(grpc.RpcError) as raised:
        forged.send_queue_message_simple(QueueMessage(channel=orders, body=b"x"))
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert raised.value.details() == "Error 421: authentication verification failed, signature is invalid"


def test_the_static_token_still_works_everywhere(client):
    static = client("anyone", STATIC)
    invoices = f"invoices-{uuid.uuid4().hex[:10]}"
    assert not static.send_queue_message(QueueMessage(channel=invoices, body=b"inv")).is_error
    response = static.receive_queue_messages(channel=invoices, max_messages=1, wait_timeout_in_seconds=2)
    assert not response.is_error, response.error
    assert [m.body for m in response.messages] == [b"inv"]
    response.messages[0].ack()


def test_ack_all_and_channel_deletion_need_write(client, orders):
    reader = client("reader", token())
    with pytest.raises(Exception) as raised:
        reader.ack_all_queue_messages(orders)
    assert DENIED in str(raised.value)
    writer = client("writer", token())
    writer.send_queue_message(QueueMessage(channel=orders, body=b"x"))
    assert writer.ack_all_queue_messages(orders) == 1


def test_listings_show_only_channels_the_client_may_touch(client, orders):
    static = client("anyone", STATIC)
    invoices = f"invoices-{uuid.uuid4().hex[:10]}"
    static.create_queues_channel(invoices)
    static.create_queues_channel(orders)
    reader = client("reader", token())
    names = {c.name for c in reader.list_queues_channels()}
    assert orders in names
    assert invoices not in names


# ----- a dead-letter channel is a channel the message will be written to (docs/security.md "KubeMQ") -----


def test_a_send_naming_a_dead_letter_channel_its_client_may_not_write_is_refused(client, orders):
    writer = client("writer", token())
    secrets = f"secrets-{uuid.uuid4().hex[:10]}"

    def poisoned(body: bytes) -> QueueMessage:
        return QueueMessage(channel=orders, body=body, max_receive_count=1, max_receive_queue=secrets)

    # Upstream send: the refusal is the message's own in-band result.
    result = writer.send_queue_message(poisoned(b"up"))
    assert result.is_error
    assert result.error == DENIED
    # Unary send: the RPC's error, as for the message's own channel.
    with pytest.raises(grpc.RpcError) as raised:
        writer.send_queue_message_simple(poisoned(b"unary"))
    assert raised.value.code() == grpc.StatusCode.UNKNOWN
    assert raised.value.details() == DENIED
    # Batch: one such message fails the whole call.
    with pytest.raises(Exception) as batch:
        writer.send_queue_messages_batch([QueueMessage(channel=orders, body=b"fine"), poisoned(b"batch")])
    assert DENIED in str(batch.value)
    # Nothing was sent, so nothing can ever reach the dead-letter channel.
    static = client("anyone", STATIC)
    assert static.peek_queue_messages(orders, 10, 1).messages == []
    assert secrets not in {c.name for c in static.list_queues_channels()}


def test_a_dead_letter_move_authorized_at_the_send_happens_whoever_releases_the_message(client, orders):
    # `writer` may write the dead-letter channel, so the send names it; `reader`, who may not write it, uses up
    # the message's receives. The move is the sender's, authorized when it sent, as AWS checks an SQS redrive
    # policy when it is set, not at each move.
    writer = client("writer", token())
    dead = f"{orders}-dead"
    sent = writer.send_queue_message(
        QueueMessage(channel=orders, body=b"poison", max_receive_count=1, max_receive_queue=dead)
    )
    assert not sent.is_error, sent.error
    reader = client("reader", token())
    response = reader.receive_queue_messages(channel=orders, max_messages=1, wait_timeout_in_seconds=2)
    assert [m.body for m in response.messages] == [b"poison"]
    response.messages[0].nack()
    moved = reader.receive_queue_messages(channel=dead, max_messages=1, wait_timeout_in_seconds=5)
    assert not moved.is_error, moved.error
    assert [m.body for m in moved.messages] == [b"poison"]
    assert moved.messages[0].re_route_from_queue == orders
    moved.messages[0].ack()


def test_a_dead_letter_move_still_happens_after_the_senders_right_is_withdrawn(veil_path, tmp_path):
    # `writer` may write `orders.*` when it sends; the server restarts under a policy that gives it nothing,
    # and the message it sent still moves to the dead-letter channel it named.
    policy = tmp_path / "policy.json"
    config = tmp_path / "veil.toml"
    config.write_text(
        "[kubemq]\n"
        f'auth_jwt_key = "{SECRET}"\n'
        'auth_jwt_signature_type = "HS256"\n'
        f'auth_policy_file = "{policy}"\n'
    )
    policy.write_text(json.dumps(POLICY))
    server = VeilServer(tmp_path / "data", extra_args=["--config", str(config)], log_dir=tmp_path).start()
    orders = f"orders.{uuid.uuid4().hex[:10]}"
    dead = f"{orders}-dead"
    writer = kubemq_client(server, client_id="writer", auth_token=token())
    try:
        sent = writer.send_queue_message(
            QueueMessage(channel=orders, body=b"poison", max_receive_count=1, max_receive_queue=dead)
        )
        assert not sent.is_error, sent.error
    finally:
        writer.close()
    assert server.stop() == 0, server.log_tail()
    policy.write_text(json.dumps([rule for rule in POLICY if rule["ClientID"] != "^writer$"]))
    server.start()
    reader = kubemq_client(server, client_id="reader", auth_token=token())
    try:
        response = reader.receive_queue_messages(channel=orders, max_messages=1, wait_timeout_in_seconds=2)
        assert [m.body for m in response.messages] == [b"poison"]
        response.messages[0].nack()
        moved = reader.receive_queue_messages(channel=dead, max_messages=1, wait_timeout_in_seconds=5)
        assert [m.body for m in moved.messages] == [b"poison"]
        moved.messages[0].ack()
    finally:
        reader.close()
        assert server.stop() == 0, server.log_tail()
