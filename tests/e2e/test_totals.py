"""A queue's totals add up (docs/semantics.md §9, "Totals"): after a scripted workload over SQS (boto3), Azure
Queue Storage (the Azure SDK) and KubeMQ (the KubeMQ SDK) — sends, deletes and acks, visibility 0 and nacks,
lapses, dead letters, a redrive, a re-queue, purges of all three kinds, an expiry, a FIFO duplicate, messages
left delayed and in flight — every queue's `sent` equals visible + in flight + delayed + deleted + purged +
expired + dead-lettered + moved out, in the admin API, in `/metrics` and after a kill -9 and a restart. Each
step also checks the total it should move, and that the others stay put (a purge is no delete, a redrive
deletes nothing). The server runs on the test clock, so lapses and the expiry need no sleeping."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import requests
from kubemq.queues import QueueMessage

from helpers import (TEST_CLOCK_ARGS, VeilServer, advance_clock, azure_name, kubemq_client, kubemq_receive,
                     make_client, queue_attrs, receive, veil_bin, wait_until)

TOTALS = ("sent", "received", "redelivered", "deleted", "purged", "expired", "dead_lettered", "moved_out")
DEPARTED = ("deleted", "purged", "expired", "dead_lettered", "moved_out")


@pytest.fixture(scope="module")
def server(veil_path, tmp_path_factory):
    base = tmp_path_factory.mktemp("veil-totals")
    srv = VeilServer(base / "data", log_dir=base, extra_args=TEST_CLOCK_ARGS).start()
    yield srv
    srv.kill()


def detail(server, name: str) -> dict:
    response = requests.get(f"{server.admin_endpoint}/api/v1/queues/default/{name}", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def totals(server, name: str) -> dict:
    return detail(server, name)["totals"]


def assert_adds_up(server, name: str) -> dict:
    """The queue's totals, after checking that they add up."""
    d = detail(server, name)
    q, t = d["queue"], d["totals"]
    stored = q["visible"] + q["inflight"] + q["delayed"]
    assert t["sent"] == stored + sum(t[k] for k in DEPARTED), (
        f"{name}: sent {t['sent']} != {q['visible']} visible + {q['inflight']} in flight + {q['delayed']} delayed "
        f"+ {', '.join(f'{t[k]} {k}' for k in DEPARTED)}"
    )
    return t


def settled(server, name: str) -> None:
    """Waits until nothing of `name` is in flight: the KubeMQ SDK sends an ack, a nack or a re-queue without
    waiting for its answer."""
    wait_until(lambda: detail(server, name)["queue"]["inflight"] == 0, f"nothing of {name} in flight")


def changed(before: dict, after: dict) -> dict:
    """The totals that moved, by how much."""
    return {k: after[k] - before[k] for k in TOTALS if after[k] != before[k]}


def metric(server, family: str, name: str) -> int:
    text = requests.get(f"{server.admin_endpoint}/metrics", timeout=10).text
    pattern = re.compile(rf'^{family}\{{namespace="default",queue="{re.escape(name)}"[^}}]*\}} (\S+)$', re.M)
    found = pattern.search(text)
    assert found, f"no {family} sample for {name}"
    return int(float(found.group(1)))


def test_the_totals_of_a_workload_over_three_protocols_add_up(server):
    sqs = make_client(server.endpoint)
    from azure.storage.queue import QueueServiceClient

    azure = QueueServiceClient.from_connection_string(server.azure_connection_string())
    kmq = kubemq_client(server, client_id="totals")
    work, other, src, dlq = (azure_name(n) for n in ("totals-work", "totals-other", "totals-src", "totals-dlq"))
    work_url = sqs.create_queue(QueueName=work)["QueueUrl"]
    dlq_url = sqs.create_queue(QueueName=dlq)["QueueUrl"]
    dlq_arn = queue_attrs(sqs, dlq_url, "QueueArn")["QueueArn"]
    src_url = sqs.create_queue(QueueName=src, Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})})["QueueUrl"]
    sqs.create_queue(QueueName=other)
    fifo_url = sqs.create_queue(QueueName=f"{work}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    aq = azure.get_queue_client(work)
    every = (work, other, src, dlq, f"{work}.fifo")

    def step(name: str, action, expected: dict):
        before = assert_adds_up(server, name)
        action()
        after = assert_adds_up(server, name)
        assert changed(before, after) == expected, name
        for queue in every:
            assert_adds_up(server, queue)

    # Sends through all three protocols: 10 + 5 + 5.
    step(work, lambda: [
        sqs.send_message_batch(QueueUrl=work_url, Entries=[
            {"Id": str(i), "MessageBody": f"s{i}"} for i in range(10)]),
        [aq.send_message(f"a{i}") for i in range(5)],
        kmq.send_queue_messages_batch([QueueMessage(channel=work, body=f"k{i}".encode()) for i in range(5)]),
    ], {"sent": 20})

    # A delete in each protocol: SQS DeleteMessage, Azure Delete Message, a KubeMQ ack.
    def delete_each():
        m = receive(sqs, work_url, VisibilityTimeout=30)[0]
        sqs.delete_message(QueueUrl=work_url, ReceiptHandle=m["ReceiptHandle"])
        aq.delete_message(aq.receive_message(visibility_timeout=30))
        kubemq_receive(kmq, work, wait=1).messages[0].ack()
        settled(server, work)
    step(work, delete_each, {"received": 3, "deleted": 3})

    # Given back unsettled, four ways: a receive with VisibilityTimeout=0, ChangeMessageVisibility to 0, an
    # Azure update to 0, a KubeMQ nack. Each is a redelivery.
    def give_back():
        assert len(receive(sqs, work_url, VisibilityTimeout=0)) == 1
        m = receive(sqs, work_url, VisibilityTimeout=30)[0]
        sqs.change_message_visibility(QueueUrl=work_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
        got = aq.receive_message(visibility_timeout=30)
        aq.update_message(got, visibility_timeout=0)
        kubemq_receive(kmq, work, wait=1).messages[0].nack()
        settled(server, work)
    step(work, give_back, {"received": 4, "redelivered": 4})

    # A lapse: the visibility timeout ends.
    def lapse():
        assert len(receive(sqs, work_url, VisibilityTimeout=1)) == 1
        advance_clock(server, 2)
    step(work, lapse, {"received": 1, "redelivered": 1})

    # A KubeMQ re-queue moves a message out of `work` and into `other` (a send there), deleting nothing.
    before_other = totals(server, other)
    def requeue():
        kubemq_receive(kmq, work, wait=1).messages[0].re_queue(other)
        settled(server, work)
    step(work, requeue, {"received": 1, "moved_out": 1})
    assert changed(before_other, totals(server, other)) == {"sent": 1}

    # Dead letters: received once, then moved on the next receive; the dead-letter queue counts them as sent.
    def dead_letter():
        sqs.send_message_batch(QueueUrl=src_url, Entries=[{"Id": str(i), "MessageBody": f"d{i}"} for i in range(3)])
        assert len(receive(sqs, src_url, MaxNumberOfMessages=10, VisibilityTimeout=0)) == 3
        assert receive(sqs, src_url, MaxNumberOfMessages=10, VisibilityTimeout=30) == []
    before_dlq = totals(server, dlq)
    step(src, dead_letter, {"sent": 3, "received": 3, "redelivered": 3, "dead_lettered": 3})
    assert changed(before_dlq, totals(server, dlq)) == {"sent": 3}

    # A redrive moves them back: moved out of the dead-letter queue (no delete there), sent again in the source.
    def redrive():
        sqs.start_message_move_task(SourceArn=dlq_arn)
        wait_until(lambda: totals(server, dlq)["moved_out"] == 3, "the redrive moved all three")
    before_src = totals(server, src)
    step(dlq, redrive, {"moved_out": 3})
    assert changed(before_src, totals(server, src)) == {"sent": 3}

    # Purges of all three kinds count as purged, never as deleted.
    stored = detail(server, work)["queue"]
    stored_work = stored["visible"] + stored["inflight"] + stored["delayed"]
    assert stored_work == 20 - 3 - 1, "20 sent, 3 deleted, 1 re-queued"
    step(work, lambda: sqs.purge_queue(QueueUrl=work_url), {"purged": stored_work})

    def azure_clear():
        for _ in range(3):
            aq.send_message("x")
        aq.clear_messages()
    step(work, azure_clear, {"sent": 3, "purged": 3})
    step(other, lambda: kmq.ack_all_queue_messages(channel=other, wait_time_seconds=1), {"purged": 1})

    # An expiry: an Azure message with a one-second time to live.
    def expire():
        aq.send_message("short", time_to_live=1)
        advance_clock(server, 2)
    step(work, expire, {"sent": 1, "expired": 1})

    # A FIFO duplicate is not a send.
    def fifo_sends():
        for _ in range(2):
            sqs.send_message(QueueUrl=fifo_url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="d")
    step(f"{work}.fifo", fifo_sends, {"sent": 1})

    # Left delayed and in flight: still stored, so still in the sum.
    def leave_stored():
        sqs.send_message(QueueUrl=work_url, MessageBody="later", DelaySeconds=900)
        sqs.send_message(QueueUrl=work_url, MessageBody="held")
        assert len(receive(sqs, work_url, VisibilityTimeout=600)) == 1
    step(work, leave_stored, {"sent": 2, "received": 1})
    q = detail(server, work)["queue"]
    assert (q["visible"], q["inflight"], q["delayed"]) == (0, 1, 1)

    # /metrics carries the same numbers, the two new totals included.
    t = totals(server, work)
    for family, key in (("veil_messages_sent_total", "sent"), ("veil_messages_deleted_total", "deleted"),
                        ("veil_messages_purged_total", "purged"), ("veil_messages_moved_total", "moved_out"),
                        ("veil_messages_redelivered_total", "redelivered"),
                        ("veil_messages_expired_total", "expired")):
        assert metric(server, family, work) == t[key], family
    assert metric(server, "veil_messages_moved_total", dlq) == 3
    assert metric(server, "veil_messages_dead_lettered_total", src) == 3

    # Durable with the changes they count: a kill -9 and a restart keep every total.
    kmq.close()
    before_crash = {name: totals(server, name) for name in every}
    server.kill()
    server.start()
    for name in every:
        assert totals(server, name) == before_crash[name], name
        assert_adds_up(server, name)


def test_the_cli_shows_purged_and_moved_out(server):
    """`veil queues stats` names the two totals added beside the older ones."""
    sqs = make_client(server.endpoint)
    name = azure_name("totals-cli")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="gone")
    sqs.purge_queue(QueueUrl=url)
    proc = subprocess.run([veil_bin(), "--endpoint", server.admin_endpoint, "queues", "stats", name],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in proc.stdout.splitlines()
                if re.search(r"\S\s{2,}\S", line))
    assert (rows.get("purged"), rows.get("moved out"), rows.get("deleted")) == ("1", "0", "0"), proc.stdout
