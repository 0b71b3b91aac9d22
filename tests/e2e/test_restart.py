"""Graceful restart: SIGTERM exits 0, and a server started again on the same data dir (and port) shows the same
state — queues, attributes, tags and redrive policies; visible messages with ids, bodies, attributes and
timestamps; hidden messages stay hidden until their deadline and then come back; receipts issued before the
restart still change visibility and delete; receive counts and first-receive times are kept; deleted messages
stay deleted; delayed messages stay delayed; dead-letter state (messages already moved, counts toward the
next move) carries over. Also: the server takes its data dir and listen address from VEIL_DATA_DIR /
VEIL_SQS_LISTEN and VEIL_AZURE_LISTEN, and SIGTERM with a long poll open exits promptly with code 0.

One module-scoped scenario builds the state, restarts once and snapshots the counts; each test checks one part."""

import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from helpers import VeilServer, counts, free_port, make_client, queue_attrs, receive, receive_one

BACK_AFTER = 5  # seconds: visibility of the message that must reappear on time after the restart


QUEUES = ("visible", "hidden", "back", "dlq", "src")


@pytest.fixture(scope="module")
def scenario(veil_path, tmp_path_factory):
    base = tmp_path_factory.mktemp("restart")
    srv = VeilServer(base / "data", log_dir=base).start()
    try:
        s = build_and_restart(srv)
    except BaseException:
        srv.kill()
        raise
    yield s
    srv.stop_cleanly()


def build_and_restart(srv):
    """Build the state, SIGTERM, start again on the same data dir and port; return what the tests check."""
    c = make_client(srv.endpoint)
    s = {"server": srv}

    s["visible"] = c.create_queue(QueueName="restart-visible", Attributes={"VisibilityTimeout": "40"},
                                  tags={"team": "veil"})["QueueUrl"]
    s["hidden"] = c.create_queue(QueueName="restart-hidden")["QueueUrl"]
    s["back"] = c.create_queue(QueueName="restart-back")["QueueUrl"]
    s["dlq"] = c.create_queue(QueueName="restart-dlq")["QueueUrl"]
    dlq_arn = queue_attrs(c, s["dlq"], "QueueArn")["QueueArn"]
    s["src"] = c.create_queue(QueueName="restart-src", Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})})["QueueUrl"]

    # restart-visible: three visible messages with attributes (one of them received once), one deleted, one delayed.
    q = s["visible"]
    s["deleted_id"] = c.send_message(QueueUrl=q, MessageBody="deleted")["MessageId"]
    d = receive_one(c, q, VisibilityTimeout=60)
    assert d["MessageId"] == s["deleted_id"]
    c.delete_message(QueueUrl=q, ReceiptHandle=d["ReceiptHandle"])
    s["attrs"] = {"k": {"DataType": "String", "StringValue": "v"},
                  "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}}
    s["visible_msgs"] = {}
    for i in range(3):
        r = c.send_message(QueueUrl=q, MessageBody=f"visible-{i}", MessageAttributes=s["attrs"])
        s["visible_msgs"][r["MessageId"]] = f"visible-{i}"
    s["seen_once"] = receive_one(c, q, VisibilityTimeout=0, MessageSystemAttributeNames=["All"])
    s["delayed_id"] = c.send_message(QueueUrl=q, MessageBody="delayed", DelaySeconds=60)["MessageId"]

    # restart-hidden: three messages received with a 60 s visibility; their receipts are used after the restart.
    ids = {c.send_message(QueueUrl=s["hidden"], MessageBody=f"hidden-{i}")["MessageId"] for i in range(3)}
    hidden = receive(c, s["hidden"], MaxNumberOfMessages=10, VisibilityTimeout=60, MessageSystemAttributeNames=["All"])
    assert {m["MessageId"] for m in hidden} == ids, "setup: receive did not return the three messages"
    s["hidden_msgs"] = {m["Body"]: m for m in hidden}

    # Dead-letter state: one message already moved, one received once (its next receive moves it).
    s["moved_id"] = c.send_message(QueueUrl=s["src"], MessageBody="moved-before")["MessageId"]
    receive_one(c, s["src"], VisibilityTimeout=0)
    assert receive(c, s["src"]) == [], "setup: the message did not move to the DLQ"
    s["pending_move_id"] = c.send_message(QueueUrl=s["src"], MessageBody="moves-after")["MessageId"]
    receive_one(c, s["src"], VisibilityTimeout=0)

    # restart-back: hidden for BACK_AFTER seconds just before the restart.
    s["back_id"] = c.send_message(QueueUrl=s["back"], MessageBody="comes-back")["MessageId"]
    receive_one(c, s["back"], VisibilityTimeout=BACK_AFTER)
    s["back_deadline"] = time.monotonic() + BACK_AFTER

    s["before_counts"] = {n: counts(c, s[n]) for n in QUEUES}
    s["before_attrs"] = {n: queue_attrs(c, s[n]) for n in QUEUES}

    srv.stop_cleanly()
    srv.start()
    c2 = make_client(srv.endpoint)
    s["client"] = c2
    s["after_counts"] = {n: counts(c2, s[n]) for n in QUEUES}
    return s


def test_sigterm_exits_cleanly_and_the_server_starts_again(scenario):
    assert scenario["server"].running()
    assert scenario["server"].starts == 2


def test_queues_attributes_and_tags_survive_the_restart(scenario):
    c = scenario["client"]
    for name in QUEUES:
        before = scenario["before_attrs"][name]
        static = {k: v for k, v in before.items() if not k.startswith("ApproximateNumber")}
        after = queue_attrs(c, scenario[name])
        assert {k: after.get(k) for k in static} == static, f"{name}: attributes changed across the restart"
    assert c.list_queue_tags(QueueUrl=scenario["visible"]).get("Tags") == {"team": "veil"}
    listed = c.list_queues(QueueNamePrefix="restart-").get("QueueUrls", [])
    assert sorted(listed) == sorted(scenario[n] for n in QUEUES)


def test_message_counts_are_unchanged_by_the_restart(scenario):
    assert scenario["after_counts"] == scenario["before_counts"]
    assert scenario["after_counts"]["visible"] == (3, 0, 1)
    assert scenario["after_counts"]["hidden"] == (0, 3, 0)
    assert scenario["after_counts"]["back"] == (0, 1, 0), "the message hidden just before the restart is visible"


def test_visible_messages_survive_with_ids_bodies_attributes_and_counts(scenario):
    c = scenario["client"]
    got = {m["MessageId"]: m for m in receive(
        c, scenario["visible"], MaxNumberOfMessages=10, VisibilityTimeout=60,
        MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"])}
    assert {i: m["Body"] for i, m in got.items()} == scenario["visible_msgs"], \
        "exactly the three visible messages must be delivered (not the deleted or the delayed one)"
    for m in got.values():
        assert m["MessageAttributes"] == scenario["attrs"]
    seen = scenario["seen_once"]
    again = got[seen["MessageId"]]["Attributes"]
    assert again["ApproximateReceiveCount"] == "2", "receive count lost in the restart"
    assert again["ApproximateFirstReceiveTimestamp"] == seen["Attributes"]["ApproximateFirstReceiveTimestamp"]
    assert again["SentTimestamp"] == seen["Attributes"]["SentTimestamp"]
    assert scenario["deleted_id"] not in got and scenario["delayed_id"] not in got


def test_receipts_issued_before_the_restart_still_work(scenario):
    c, q, h = scenario["client"], scenario["hidden"], scenario["hidden_msgs"]
    c.change_message_visibility(QueueUrl=q, ReceiptHandle=h["hidden-0"]["ReceiptHandle"], VisibilityTimeout=0)
    m = receive_one(c, q, MaxNumberOfMessages=10, VisibilityTimeout=60, MessageSystemAttributeNames=["All"])
    assert m["MessageId"] == h["hidden-0"]["MessageId"]
    assert m["Attributes"]["ApproximateReceiveCount"] == "2"
    assert m["Attributes"]["ApproximateFirstReceiveTimestamp"] == \
        h["hidden-0"]["Attributes"]["ApproximateFirstReceiveTimestamp"]
    c.delete_message(QueueUrl=q, ReceiptHandle=h["hidden-1"]["ReceiptHandle"])
    assert counts(c, q) == (0, 2, 0), "delete with a pre-restart receipt did not delete"
    assert receive(c, q, MaxNumberOfMessages=10) == [], "hidden-2 became visible before its 60 s deadline"


def test_message_hidden_before_the_restart_comes_back_at_its_deadline(scenario):
    c, deadline = scenario["client"], scenario["back_deadline"]
    found, now = None, None
    while found is None and time.monotonic() < deadline + 3:
        msgs = receive(c, scenario["back"], VisibilityTimeout=60, WaitTimeSeconds=1)
        if msgs:
            found, now = msgs[0], time.monotonic()
    assert found is not None, "the message hidden before the restart never came back"
    assert found["MessageId"] == scenario["back_id"]
    assert now >= deadline - 0.3, f"it came back {deadline - now:.2f}s before its deadline"


def test_dead_letter_state_survives_the_restart(scenario):
    c = scenario["client"]
    assert receive(c, scenario["src"], MaxNumberOfMessages=10) == [], \
        "the receive count toward maxReceiveCount was lost: the message was delivered instead of moved"
    moved = receive(c, scenario["dlq"], MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])
    by_id = {m["MessageId"]: m for m in moved}
    assert set(by_id) == {scenario["moved_id"], scenario["pending_move_id"]}
    for m in moved:
        assert m["Attributes"]["ApproximateReceiveCount"] == "2"
        assert m["Attributes"]["DeadLetterQueueSourceArn"].endswith(":restart-src")
    assert c.list_dead_letter_source_queues(QueueUrl=scenario["dlq"])["queueUrls"] == [scenario["src"]]


def test_server_reads_data_dir_and_listen_address_from_the_environment(veil_path, tmp_path):
    port, azure_port, kubemq_port, admin_port = free_port(), free_port(), free_port(), free_port()
    env = dict(os.environ, VEIL_DATA_DIR=str(tmp_path / "env-data"), VEIL_SQS_LISTEN=f"127.0.0.1:{port}",
               VEIL_AZURE_LISTEN=f"127.0.0.1:{azure_port}", VEIL_KUBEMQ_LISTEN=f"127.0.0.1:{kubemq_port}",
               VEIL_ADMIN_LISTEN=f"127.0.0.1:{admin_port}")
    log = open(tmp_path / "env.log", "wb")
    proc = subprocess.Popen([veil_path, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, f"veil serve exited {proc.returncode}: {(tmp_path / 'env.log').read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                socket.create_connection(("127.0.0.1", azure_port), timeout=0.5).close()
                socket.create_connection(("127.0.0.1", kubemq_port), timeout=0.5).close()
                socket.create_connection(("127.0.0.1", admin_port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "veil did not listen on VEIL_SQS_LISTEN and VEIL_AZURE_LISTEN"
                time.sleep(0.05)
        make_client(f"http://127.0.0.1:{port}").create_queue(QueueName="from-env")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    # The queue went to VEIL_DATA_DIR: a server started with the flag on that dir has it.
    srv = VeilServer(tmp_path / "env-data", log_dir=tmp_path).start()
    try:
        assert make_client(srv.endpoint).get_queue_url(QueueName="from-env")["QueueUrl"].endswith("/from-env")
    finally:
        srv.stop_cleanly()


def test_sigterm_ends_an_open_long_poll_with_an_empty_reply_and_exits_cleanly(make_server):
    srv = make_server()
    c = make_client(srv.endpoint)
    url = c.create_queue(QueueName="long-poll-at-shutdown")["QueueUrl"]
    box = {}

    def poll():
        try:
            box["result"] = c.receive_message(QueueUrl=url, WaitTimeSeconds=20)
        except Exception as e:  # noqa: BLE001 - recorded, and the test fails on it below
            box["result"] = e

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(1.0)
    assert t.is_alive(), f"the 20 s long poll on an empty queue returned before the SIGTERM: {box}"
    started = time.monotonic()
    rc = srv.stop()
    took = time.monotonic() - started
    t.join(25)
    assert rc == 0, f"exit code {rc} after SIGTERM\n{srv.log_tail()}"
    assert took < 10, f"SIGTERM with a 20 s long poll open took {took:.1f}s to exit (the wait was not ended)"
    assert "result" in box, "the long poll never returned after the server stopped"
    # Graceful shutdown ends the long poll with the (empty) answer it has, and finishes that request before
    # exiting: the client sees a 200 with no messages, not a dropped connection.
    result = box["result"]
    assert not isinstance(result, Exception), f"the long poll failed instead of being answered: {result!r}"
    assert result["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert result.get("Messages", []) == [], f"unexpected messages: {result}"
