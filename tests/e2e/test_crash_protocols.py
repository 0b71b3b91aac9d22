"""kill -9 under load through Azure Queue Storage and KubeMQ (test_crash.py does SQS). Threads send, receive,
settle and hide messages with each protocol's official SDK for about 2 s, recording only what the server
acknowledged; the server is killed with SIGKILL mid-traffic and started again on the same data dir. Then, as
after a graceful restart:

- Azure: every acknowledged put is there unless an acknowledged or in-doubt delete removed it; nothing unknown
  appears and nothing comes twice in one drain; deleted messages stay deleted; messages hidden for 60 s before
  the kill stay hidden, and their pre-kill pop receipts still update and delete them; dequeue counts survive.
- KubeMQ: every acknowledged send is there unless a pull (which acks before it answers) took it or a
  fire-and-forget ack may have (a pull cut off by the kill may have taken up to its maximum, unseen: the
  number missing is bounded by those maxima); delayed messages stay delayed; messages held by a downstream transaction that
  died with the server come back when the server-side visibility lapses, with their receive count kept.

Requests cut off by the kill are "in doubt": the checks allow both outcomes for exactly the messages they
named. Worker visibilities are short (Azure 2 s; KubeMQ's server-side visibility is configured to 1 s), so an
in-doubt receive (whose messages are unknown) has lapsed before the drain starts."""

from __future__ import annotations

import random

import pytest
from azure.core.exceptions import ResourceNotFoundError
from kubemq.queues import QueueMessage

from crash_support import Ledger, run_until_killed, sleep_until
from helpers import channel_counts, channel_name, counts, kubemq_client, make_client

RUN_SECONDS = 2.0
WORKER_VISIBILITY = 2
LONG = 60


# ---------------------------------------------------------------------------------------------- Azure


def azure_queue_client(server, name):
    from azure.storage.queue import QueueClient

    return QueueClient.from_connection_string(
        server.azure_connection_string(), name, retry_total=0, connection_timeout=5, read_timeout=10
    )


def azure_producer(server, name, ledger, tag, seed):
    q = azure_queue_client(server, name)
    rng = random.Random(seed)
    n = 0
    while not ledger.killed.is_set():
        body = f"{tag}-{n}-{'x' * rng.randint(0, 300)}"
        n += 1
        with ledger.lock:
            ledger.attempted_bodies.add(body)
        try:
            sent = q.send_message(body)
        except Exception as e:  # noqa: BLE001 - every failure is classified
            ledger.failed("put", e)
            continue
        with ledger.lock:
            ledger.sent[sent.id] = body


def azure_consumer(server, name, ledger, seed):
    q = azure_queue_client(server, name)
    rng = random.Random(seed)
    while not ledger.killed.is_set():
        try:
            got = list(q.receive_messages(messages_per_page=rng.randint(1, 32), max_messages=32,
                                          visibility_timeout=WORKER_VISIBILITY))
        except Exception as e:  # noqa: BLE001
            ledger.failed("get", e)
            continue
        with ledger.lock:
            for m in got:
                ledger.receives[m.id] += 1
        for m in got:
            roll = rng.random()
            try:
                if roll < 0.5:
                    try:
                        q.delete_message(m.id, m.pop_receipt)
                    except Exception:
                        with ledger.lock:
                            ledger.delete_in_doubt.add(m.id)
                        raise
                    with ledger.lock:
                        ledger.deleted.add(m.id)
                        ledger.delete_in_doubt.discard(m.id)
                elif roll < 0.65:
                    try:
                        updated = q.update_message(m.id, m.pop_receipt, visibility_timeout=LONG)
                    except Exception:
                        with ledger.lock:
                            ledger.long_in_doubt[m.id] = None
                        raise
                    with ledger.lock:
                        ledger.long_hidden[m.id] = updated.pop_receipt
                        ledger.long_in_doubt.pop(m.id, None)
                elif roll < 0.8:
                    with ledger.lock:
                        ledger.nacked.add(m.id)
                    q.update_message(m.id, m.pop_receipt, visibility_timeout=0)
                # else: leave it; it reappears after WORKER_VISIBILITY seconds
            except ResourceNotFoundError:
                # Our 2 s lapsed and another consumer got the message (a new pop receipt) or deleted it: the
                # old pop receipt is rightly refused, and the operation did nothing.
                with ledger.lock:
                    ledger.delete_in_doubt.discard(m.id)
                    ledger.long_in_doubt.pop(m.id, None)
            except Exception as e:  # noqa: BLE001
                ledger.failed("delete/update", e)
            if ledger.killed.is_set():
                break


def azure_drain(q, visibility=LONG):
    """Gets until the queue answers nothing; every message is kept hidden `visibility` seconds."""
    out = []
    while True:
        page = list(q.receive_messages(messages_per_page=32, max_messages=32, visibility_timeout=visibility))
        if not page:
            return out
        out.extend(page)


def test_azure_kill_9_mid_traffic_loses_no_acknowledged_write(make_server):
    srv = make_server()
    work, held_name = "crash-az-work", "crash-az-held"
    q = azure_queue_client(srv, work)
    q.create_queue()
    held_q = azure_queue_client(srv, held_name)
    held_q.create_queue()

    # Deterministic part: five messages hidden for 60 s with known pop receipts before the traffic starts.
    held_ids = {held_q.send_message(f"held-{i}").id for i in range(5)}
    held = azure_drain(held_q)
    assert {m.id for m in held} == held_ids

    ledger = Ledger()
    workers = [lambda i=i: azure_producer(srv, work, ledger, f"p{i}", i) for i in range(2)]
    workers += [lambda i=i: azure_consumer(srv, work, ledger, 100 + i) for i in range(2)]
    killed_at = run_until_killed(srv, ledger, workers, RUN_SECONDS)
    ledger.assert_meaningful()
    assert ledger.deleted, "the consumers never deleted anything"
    print(ledger.summary("Azure"))
    srv.start()
    q, held_q = azure_queue_client(srv, work), azure_queue_client(srv, held_name)

    # Held messages: still hidden right after the restart, and their pre-kill pop receipts still work.
    assert held_q.peek_messages(max_messages=32) == [], "messages hidden for 60 s reappeared after the crash"
    assert held_q.get_queue_properties().approximate_message_count == 5
    for m in held[:3]:
        held_q.update_message(m.id, m.pop_receipt, visibility_timeout=0)
    for m in held[3:]:
        held_q.delete_message(m.id, m.pop_receipt)
    back = azure_drain(held_q)
    assert sorted(m.id for m in back) == sorted(m.id for m in held[:3])
    assert {m.dequeue_count for m in back} == {2}, "dequeue counts did not survive the crash"
    assert held_q.get_queue_properties().approximate_message_count == 3, "deletes with pre-kill receipts"

    # Work queue: wait until every worker get (2 s, possibly in doubt) has lapsed, then drain.
    sleep_until(killed_at + WORKER_VISIBILITY + 0.5)
    drained = azure_drain(q)
    ids = [m.id for m in drained]
    by_id = {m.id: m for m in drained}
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    assert not dupes, f"{len(dupes)} messages delivered twice in one drain: {dupes[:5]}"
    unknown = [m.content[:40] for m in drained if m.content not in ledger.attempted_bodies]
    assert not unknown, f"messages nobody put appeared: {unknown[:5]}"
    resurrected = sorted(set(ids) & ledger.deleted)
    assert not resurrected, f"{len(resurrected)} acknowledged-deleted messages came back: {resurrected[:5]}"
    for i, m in by_id.items():
        if i in ledger.sent:
            assert m.content == ledger.sent[i], f"message {i} came back with another body"

    # Azure honours only a message's newest pop receipt, so an acknowledged 60 s hide can be undone only by
    # its own consumer's later operations, which this workload never makes: the hide holds.
    hidden_must = set(ledger.long_hidden) - ledger.deleted - ledger.delete_in_doubt
    shown = sorted(hidden_must & set(ids))
    assert not shown, f"{len(shown)} messages hidden for 60 s before the kill were visible after it: {shown[:5]}"
    maybe_hidden = set(ledger.long_in_doubt) - set(ledger.long_hidden)
    missing = [
        i for i in ledger.sent
        if i not in by_id and i not in ledger.deleted and i not in ledger.delete_in_doubt
        and i not in hidden_must and i not in maybe_hidden
    ]
    assert not missing, (
        f"{len(missing)} of {len(ledger.sent)} acknowledged puts are gone after kill -9 "
        f"(not deleted, not hidden): {missing[:5]}"
    )

    # Pre-kill pop receipts of the 60 s hides still work: make the messages visible and get them.
    refused = []
    for i in hidden_must:
        try:
            q.update_message(i, ledger.long_hidden[i], visibility_timeout=0)
        except ResourceNotFoundError as e:
            refused.append((i, e.error_code))
    assert not refused, f"{len(refused)} pop receipts issued before the kill were refused after it: {refused[:3]}"
    returned = {m.id: m for m in azure_drain(q)}
    assert set(returned) == hidden_must, (
        f"after making the hidden messages visible: {len(set(returned) - hidden_must)} unexpected, "
        f"{len(hidden_must - set(returned))} missing"
    )

    # Dequeue counts never go back.
    for i, m in list(by_id.items()) + list(returned.items()):
        assert m.dequeue_count >= ledger.receives[i] + 1, (
            f"dequeue count of {i} went back: {m.dequeue_count} after {ledger.receives[i]} gets"
        )

    # What is left is what this test's drains hide, plus in-doubt hides and deletes of messages never seen.
    seen = set(by_id) | set(returned)
    unseen_in_doubt = (maybe_hidden | (set(ledger.long_hidden) & ledger.delete_in_doubt)) - seen
    left = q.get_queue_properties().approximate_message_count
    assert len(seen) <= left <= len(seen) + len(unseen_in_doubt), (
        f"{left} messages left, expected {len(seen)} (+ up to {len(unseen_in_doubt)} in doubt)"
    )
    srv.stop_cleanly()


# --------------------------------------------------------------------------------------------- KubeMQ

SERVER_VISIBILITY = 1  # the KubeMQ server-side visibility configured below, in seconds


def kubemq_producer(server, channel, ledger, tag, seed):
    client = kubemq_client(server, client_id=f"producer-{tag}")
    rng = random.Random(seed)
    n = 0
    try:
        while not ledger.killed.is_set():
            bodies = ledger.next_bodies(rng, tag, n, [1, 1, 1, 5])
            n += len(bodies)
            try:
                if len(bodies) == 1:
                    results = [client.send_queue_message(QueueMessage(channel=channel, body=bodies[0].encode()))]
                else:
                    results = client.send_queue_messages_batch(
                        [QueueMessage(channel=channel, body=b.encode()) for b in bodies]).results
            except Exception as e:  # noqa: BLE001 - every failure is classified
                ledger.failed("send", e)
                continue
            errors = [r.error for r in results if r.is_error]
            if errors and not ledger.failed("send", RuntimeError(errors[0])):
                continue
            with ledger.lock:
                for body, r in zip(bodies, results):
                    if not r.is_error:
                        ledger.sent[r.id] = body
    finally:
        client.close()


def kubemq_consumer(server, channel, ledger, seed):
    """Alternates pulls (acked before the answer: acknowledged deletes) with downstream transactions that ack
    (fire-and-forget: in doubt until the state shows it), nack, or leave their messages to the server-side
    visibility."""
    client = kubemq_client(server, client_id=f"consumer-{seed}")
    rng = random.Random(seed)
    try:
        while not ledger.killed.is_set():
            try:
                if rng.random() < 0.3:
                    pull_max = rng.randint(1, 10)
                    try:
                        pulled = client.pull(channel, max_messages=pull_max, wait_timeout_in_seconds=1)
                    except Exception:
                        # A pull acks before it answers: one cut off by the kill may have taken up to its
                        # maximum, unseen.
                        with ledger.lock:
                            ledger.taken_in_doubt += pull_max
                        raise
                    if pulled.is_error:
                        raise RuntimeError(pulled.error)
                    with ledger.lock:
                        for m in pulled.messages:
                            ledger.receives[m.id] += 1
                            ledger.deleted.add(m.id)
                    continue
                got = client.receive_queue_messages(channel=channel, max_messages=rng.randint(1, 10),
                                                    wait_timeout_in_seconds=1)
                if got.is_error:
                    raise RuntimeError(got.error)
            except Exception as e:  # noqa: BLE001
                ledger.failed("receive", e)
                continue
            with ledger.lock:
                for m in got.messages:
                    ledger.receives[m.id] += 1
            for m in got.messages:
                roll = rng.random()
                try:
                    if roll < 0.5:
                        with ledger.lock:
                            ledger.delete_in_doubt.add(m.id)
                        m.ack()
                    elif roll < 0.7:
                        with ledger.lock:
                            ledger.nacked.add(m.id)
                        m.nack()
                    # else: leave it to the server-side visibility
                except Exception as e:  # noqa: BLE001
                    ledger.failed("ack/nack", e)
                if ledger.killed.is_set():
                    break
    finally:
        client.close()


def kubemq_drain(client, channel):
    """Pulls until a pull answers nothing; pulled messages are acked, i.e. gone."""
    out = []
    while True:
        pulled = client.pull(channel, max_messages=100, wait_timeout_in_seconds=1)
        assert not pulled.is_error, pulled.error
        if not pulled.messages:
            return out
        out.extend(pulled.messages)


@pytest.fixture
def short_visibility_server(make_server, tmp_path):
    config = tmp_path / "veil.toml"
    config.write_text(f"[kubemq]\ndefault_visibility_seconds = {SERVER_VISIBILITY}\n")
    return make_server(extra_args=["--config", str(config)])


def test_kubemq_kill_9_mid_traffic_loses_no_acknowledged_send(short_visibility_server):
    srv = short_visibility_server
    work, delayed, held = channel_name("crash-kmq"), channel_name("crash-kmq-delayed"), channel_name("crash-kmq-held")
    setup = kubemq_client(srv, client_id="setup")
    try:
        for i in range(5):
            r = setup.send_queue_message(QueueMessage(channel=delayed, body=f"later-{i}".encode(),
                                                      delay_in_seconds=LONG))
            assert not r.is_error, r.error
        for i in range(3):
            assert not setup.send_queue_message(QueueMessage(channel=held, body=f"held-{i}".encode())).is_error

        ledger = Ledger()
        workers = [lambda i=i: kubemq_producer(srv, work, ledger, f"p{i}", i) for i in range(2)]
        workers += [lambda i=i: kubemq_consumer(srv, work, ledger, 100 + i) for i in range(2)]

        # A downstream transaction that is open when the server dies: its messages are never settled.
        open_transaction = setup.receive_queue_messages(channel=held, max_messages=3, wait_timeout_in_seconds=1)
        assert not open_transaction.is_error, open_transaction.error
        assert sorted(m.body for m in open_transaction.messages) == [b"held-0", b"held-1", b"held-2"]
        killed_at = run_until_killed(srv, ledger, workers, RUN_SECONDS)
    finally:
        setup.close()
    ledger.assert_meaningful()
    print(ledger.summary("KubeMQ"))
    srv.start()
    sqs = make_client(srv.endpoint)
    client = kubemq_client(srv, client_id="after-crash")
    try:
        # Delayed messages stay delayed across the crash.
        delayed_url = sqs.get_queue_url(QueueName=delayed)["QueueUrl"]
        assert counts(sqs, delayed_url) == (0, 0, 5), "delayed messages changed state across the crash"
        assert kubemq_drain(client, delayed) == [], "messages delayed for 60 s were delivered after the crash"

        # The dead transaction's messages come back once the server-side visibility lapses, counted.
        sleep_until(killed_at + SERVER_VISIBILITY + 0.5)
        back = kubemq_drain(client, held)
        assert sorted(m.body for m in back) == [b"held-0", b"held-1", b"held-2"]
        assert {m.receive_count for m in back} == {2}, "receive counts did not survive the crash"

        drained = kubemq_drain(client, work)
        ids = [m.id for m in drained]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        assert not dupes, f"{len(dupes)} messages delivered twice in one drain: {dupes[:5]}"
        unknown = [m.body[:40] for m in drained if m.body.decode() not in ledger.attempted_bodies]
        assert not unknown, f"messages nobody sent appeared: {unknown[:5]}"
        resurrected = sorted(set(ids) & ledger.deleted)
        assert not resurrected, f"{len(resurrected)} messages taken by a pull came back: {resurrected[:5]}"
        by_id = {m.id: m for m in drained}
        for i, m in by_id.items():
            if i in ledger.sent:
                assert m.body.decode() == ledger.sent[i], f"message {i} came back with another body"
            assert m.receive_count >= ledger.receives[i] + 1, (
                f"receive count of {i} went back: {m.receive_count} after {ledger.receives[i]} receives"
            )
        missing = [i for i in ledger.sent if i not in by_id and i not in ledger.deleted
                   and i not in ledger.delete_in_doubt]
        assert len(missing) <= ledger.taken_in_doubt, (
            f"{len(missing)} of {len(ledger.sent)} acknowledged sends are gone after kill -9, and the pulls cut "
            f"off by it could have taken only {ledger.taken_in_doubt}: {missing[:5]}"
        )
        assert channel_counts(sqs, work) == (0, 0), "the drain left messages behind"
    finally:
        client.close()
    srv.stop_cleanly()
