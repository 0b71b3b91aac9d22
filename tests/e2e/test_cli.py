"""The `veil` CLI against a real server's admin endpoint: every subcommand, its `--output json` (parsed) and
its exit codes (0 success, 1 the server refused, 2 usage, 3 unreachable, 4 not found); peek changes nothing;
export -> import keeps bodies, attributes and groups; a dead-letter queue made through boto3 is redriven back
with --wait; receive -> update -> delete --receipt; top --iterations 1; purge's confirmation on a terminal."""

from __future__ import annotations

import base64
import json
import os
import pty
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from helpers import free_port, queue_attrs, veil_bin

TIMEOUT = 60


def run_cli(server, *args, stdin: str | None = None, endpoint: str | None = None, check: int | None = 0):
    """Runs `veil --endpoint <admin> ARGS`; asserts the exit code when `check` is not None."""
    cmd = [veil_bin(), "--endpoint", endpoint or server.admin_endpoint, *args]
    proc = subprocess.run(
        cmd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )
    if check is not None:
        assert proc.returncode == check, (
            f"{' '.join(cmd)} exited {proc.returncode}, expected {check}\n"
            f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
    return proc


def cli_json(server, *args, stdin: str | None = None):
    proc = run_cli(server, "--output", "json", *args, stdin=stdin)
    return json.loads(proc.stdout)


def peek_all(server, queue):
    return cli_json(server, "messages", "peek", queue, "--all", "--max", "1000")["messages"]


# --- queues ---------------------------------------------------------------------------------------------


def test_health_exits_0_while_the_probe_answers_200_and_3_when_nothing_answers(server):
    assert run_cli(server, "health").stdout.strip() == "ok"
    assert run_cli(server, "health", "--ready").stdout.strip() == "ready"
    closed = run_cli(server, "health", endpoint=f"http://127.0.0.1:{free_port()}", check=3)
    assert "cannot reach" in closed.stderr


def test_queues_create_list_stats_delete(server, queue_name):
    created = cli_json(server, "queues", "create", f"team-a/{queue_name}", "--visibility-timeout", "45",
                       "--delay", "2", "--retention", "3600")
    assert created["queue"]["namespace"] == "team-a"
    assert created["queue"]["created_by"] == "admin"
    assert created["settings"]["visibility_timeout_s"] == 45
    assert created["settings"]["delay_s"] == 2
    assert created["settings"]["retention_s"] == 3600

    listed = cli_json(server, "queues", "list", "--namespace", "team-a", "--prefix", queue_name)["queues"]
    assert [(q["namespace"], q["name"]) for q in listed] == [("team-a", queue_name)]

    table = run_cli(server, "queues", "list", "--namespace", "team-a").stdout
    header = table.splitlines()[0].split()
    assert header == ["NAMESPACE", "NAME", "CREATED_BY", "VISIBLE", "IN-FLIGHT", "DELAYED", "OLDEST", "BYTES"]
    assert any(line.split()[:3] == ["team-a", queue_name, "admin"] for line in table.splitlines()[1:])

    stats = cli_json(server, "queues", "stats", f"team-a/{queue_name}")
    assert stats["queue"]["name"] == queue_name
    stats_table = run_cli(server, "queues", "stats", f"team-a/{queue_name}").stdout
    assert "visibility timeout s  45" in stats_table

    # A bare name is in namespace `default`: this one does not exist there.
    missing = run_cli(server, "queues", "stats", queue_name, check=4)
    assert missing.stderr.startswith("error: QueueNotFound: ")

    assert cli_json(server, "queues", "delete", f"team-a/{queue_name}", "--yes") == {"deleted": True}
    run_cli(server, "queues", "stats", f"team-a/{queue_name}", check=4)


def test_creating_an_existing_queue_is_refused(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    proc = run_cli(server, "queues", "create", queue_name, check=1)
    assert proc.stderr.startswith("error: QueueExists: ")


def test_fifo_queue_and_sqs_created_queue_show_their_protocol(server, sqs, queue_name):
    cli_json(server, "queues", "create", f"{queue_name}.fifo", "--fifo")
    sqs.create_queue(QueueName=queue_name)
    listed = {q["name"]: q for q in cli_json(server, "queues", "list", "--prefix", queue_name)["queues"]}
    assert listed[f"{queue_name}.fifo"]["fifo"] is True
    assert listed[f"{queue_name}.fifo"]["created_by"] == "admin"
    assert listed[queue_name]["created_by"] == "sqs"


def test_purge_with_yes(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    for i in range(3):
        run_cli(server, "messages", "send", queue_name, f"m{i}")
    assert cli_json(server, "queues", "purge", queue_name, "--yes") == {"purged": 3}
    assert peek_all(server, queue_name) == []


def test_purge_without_yes_and_without_a_terminal_refuses(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    run_cli(server, "messages", "send", queue_name, "keep me")
    proc = run_cli(server, "queues", "purge", queue_name, check=2)
    assert "--yes" in proc.stderr
    assert len(peek_all(server, queue_name)) == 1, "a refused purge deleted messages"


def purge_on_a_terminal(server, queue: str, typed: str, command: str = "purge") -> subprocess.CompletedProcess:
    """Runs `veil queues purge QUEUE` (or `delete`) with a pseudo-terminal as stdin and types `typed` at its
    prompt."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [veil_bin(), "--endpoint", server.admin_endpoint, "queues", command, queue],
            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        os.write(master, typed.encode() + b"\n")
        out, err = proc.communicate(timeout=TIMEOUT)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    finally:
        os.close(master)
        os.close(slave)


def test_purge_on_a_terminal_asks_for_the_name(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    run_cli(server, "messages", "send", queue_name, "m")

    wrong = purge_on_a_terminal(server, queue_name, "not-the-name")
    assert wrong.returncode == 1, wrong
    assert "Type the queue's name" in wrong.stderr
    assert "error: ConfirmationMismatch: " in wrong.stderr
    assert len(peek_all(server, queue_name)) == 1

    right = purge_on_a_terminal(server, queue_name, queue_name)
    assert right.returncode == 0, right
    assert f"purged 1 messages from default/{queue_name}" in right.stdout
    assert peek_all(server, queue_name) == []


def test_delete_without_yes_and_without_a_terminal_refuses(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    run_cli(server, "messages", "send", queue_name, "keep me")
    proc = run_cli(server, "queues", "delete", queue_name, check=2)
    assert "--yes" in proc.stderr and "no terminal" in proc.stderr, proc.stderr
    assert len(peek_all(server, queue_name)) == 1, "a refused delete deleted the queue"


def test_delete_on_a_terminal_asks_for_the_name(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    run_cli(server, "messages", "send", queue_name, "m")

    wrong = purge_on_a_terminal(server, queue_name, "not-the-name", command="delete")
    assert wrong.returncode == 2, wrong
    assert "Type the queue's name" in wrong.stderr
    assert "nothing deleted" in wrong.stderr
    assert len(peek_all(server, queue_name)) == 1

    right = purge_on_a_terminal(server, queue_name, queue_name, command="delete")
    assert right.returncode == 0, right
    assert f"deleted default/{queue_name}" in right.stdout
    run_cli(server, "queues", "stats", queue_name, check=4)


# --- messages -------------------------------------------------------------------------------------------


def test_peek_all_pages_with_a_cursor_instead_of_stopping_silently(server, sqs, queue_name):
    url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    for start in range(0, 25, 10):
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "MessageBody": f"m{i}"} for i in range(start, min(start + 10, 25))])
    seen, from_seq, starts = [], None, []
    while True:
        args = ["messages", "peek", queue_name, "--all", "--max", "10"]
        if from_seq is not None:
            args += ["--from-seq", str(from_seq)]
        starts.append(from_seq)
        page = cli_json(server, *args)
        seen += [m["body"] for m in page["messages"]]
        from_seq = page.get("next_from_seq")
        if from_seq is None:
            break
        assert from_seq == page["messages"][-1]["seq"] + 1
    assert sorted(seen, key=lambda b: int(b[1:])) == [f"m{i}" for i in range(25)] and len(seen) == 25
    assert len(starts) == 3
    # The table prints the next page's command on stderr, the rows alone on stdout.
    table = run_cli(server, "messages", "peek", queue_name, "--all", "--max", "10")
    assert f"veil messages peek default/{queue_name} --all --max 10 --from-seq " in table.stderr, table.stderr
    assert len(table.stdout.strip().splitlines()) == 11  # header + 10 rows
    last = run_cli(server, "messages", "peek", queue_name, "--all", "--max", "10", "--from-seq", str(starts[-1]))
    assert "more after this page" not in last.stderr
    # More than a page can hold is refused, not cut silently.
    assert "1..=1000" in run_cli(server, "messages", "peek", queue_name, "--max", "5000", check=2).stderr
    run_cli(server, "messages", "peek", queue_name, "--from-seq", "3", check=2)  # a cursor needs --all


def test_send_and_peek_change_nothing(server, sqs, queue_name):
    url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    sent = cli_json(server, "messages", "send", queue_name, "hello",
                    "--attribute", "kind=String:greeting", "--attribute", "n=Number:3")["sent"]
    assert len(sent) == 1 and sent[0]["seq"] >= 0

    for _ in range(3):
        peeked = cli_json(server, "messages", "peek", queue_name)["messages"]
        assert [m["body"] for m in peeked] == ["hello"]
        assert peeked[0]["receive_count"] == 0
        assert peeked[0]["receipt"] is None
    assert peeked[0]["id"] == sent[0]["id"]
    assert peeked[0]["attributes"] == {
        "kind": {"data_type": "String", "string_value": "greeting", "binary_value_base64": None},
        "n": {"data_type": "Number", "string_value": "3", "binary_value_base64": None},
    }
    attrs = queue_attrs(sqs, url, "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")
    assert attrs == {"ApproximateNumberOfMessages": "1", "ApproximateNumberOfMessagesNotVisible": "0"}

    table = run_cli(server, "messages", "peek", queue_name).stdout.splitlines()
    assert table[0].split() == ["SEQ", "ID", "STATE", "RECEIVES", "SENT", "BODY"]
    assert table[1].split()[2:4] == ["visible", "0"] and table[1].endswith("hello")

    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"],
                              AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert got[0]["Body"] == "hello"
    assert got[0]["Attributes"]["ApproximateReceiveCount"] == "1", "a peek counted as a receive"


def test_send_from_a_file_keeps_its_bytes(server, queue_name, tmp_path):
    run_cli(server, "queues", "create", queue_name)
    data = bytes(range(256))
    path = tmp_path / "body.bin"
    path.write_bytes(data)
    run_cli(server, "messages", "send", queue_name, "--file", str(path),
            "--attribute", "raw=Binary:" + base64.b64encode(b"\x00\x01").decode())
    [m] = peek_all(server, queue_name)
    assert base64.b64decode(m["body_base64"]) == data
    assert m["body"] is None
    assert m["attributes"]["raw"]["binary_value_base64"] == "AAE="


def test_peek_all_shows_in_flight_and_delayed(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    run_cli(server, "messages", "send", queue_name, "now")
    run_cli(server, "messages", "send", queue_name, "later", "--delay", "600")
    run_cli(server, "messages", "receive", queue_name)
    assert cli_json(server, "messages", "peek", queue_name)["messages"] == []
    states = {m["body"]: m["state"] for m in peek_all(server, queue_name)}
    assert states == {"now": "inflight", "later": "delayed"}


def test_receive_update_delete_by_receipt(server, sqs, queue_name):
    url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    run_cli(server, "messages", "send", queue_name, "work")
    [got] = cli_json(server, "messages", "receive", queue_name, "--visibility-timeout", "30")["messages"]
    assert got["body"] == "work" and got["receive_count"] == 1 and got["receipt"]
    assert queue_attrs(sqs, url, "ApproximateNumberOfMessagesNotVisible")[
        "ApproximateNumberOfMessagesNotVisible"] == "1"

    changed = cli_json(server, "messages", "update", queue_name, "--receipt", got["receipt"],
                       "--visibility-timeout", "300")
    assert changed["visible_at_ms"] > 0
    [hidden] = peek_all(server, queue_name)
    assert hidden["visible_at_ms"] == changed["visible_at_ms"]

    assert cli_json(server, "messages", "delete", queue_name, "--receipt", got["receipt"]) == {"deleted": True}
    assert peek_all(server, queue_name) == []


def test_receive_table_prints_the_receipt(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    run_cli(server, "messages", "send", queue_name, "x")
    lines = run_cli(server, "messages", "receive", queue_name, "--wait", "1").stdout.splitlines()
    assert lines[0].split() == ["SEQ", "ID", "RECEIVES", "BODY", "RECEIPT"]
    receipt = lines[1].split()[-1]
    run_cli(server, "messages", "delete", queue_name, "--receipt", receipt)
    assert peek_all(server, queue_name) == []


def test_an_invalid_receipt_is_refused(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    proc = run_cli(server, "messages", "delete", queue_name, "--receipt", "not-a-receipt", check=1)
    assert proc.stderr.startswith("error: ReceiptInvalid: ")
    run_cli(server, "messages", "update", queue_name, "--receipt", "nope", "--visibility-timeout", "1", check=1)


def test_delete_by_seq_and_by_id(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    a = cli_json(server, "messages", "send", queue_name, "a")["sent"][0]
    b = cli_json(server, "messages", "send", queue_name, "b")["sent"][0]
    run_cli(server, "messages", "delete", queue_name, str(a["seq"]))
    run_cli(server, "messages", "delete", queue_name, b["id"])
    assert peek_all(server, queue_name) == []
    proc = run_cli(server, "messages", "delete", queue_name, str(a["seq"]), check=4)
    assert proc.stderr.startswith("error: MessageNotFound: ")


def test_history(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    never = cli_json(server, "messages", "send", queue_name, "never received")["sent"][0]
    assert cli_json(server, "messages", "history", queue_name, str(never["seq"]))["deliveries"] == []
    run_cli(server, "messages", "delete", queue_name, str(never["seq"]))
    sent = cli_json(server, "messages", "send", queue_name, "h")["sent"][0]
    [got] = cli_json(server, "messages", "receive", queue_name, "--visibility-timeout", "60")["messages"]
    history = cli_json(server, "messages", "history", queue_name, str(sent["seq"]))
    [delivery] = history["deliveries"]
    assert (delivery["protocol"], delivery["receive_count"], delivery["ended"]["how"]) == ("admin", 1, "in_flight")
    assert delivery["visibility_timeout_ms"] == 60_000
    run_cli(server, "messages", "delete", queue_name, "--receipt", got["receipt"])
    # Deleted: still answered by id, from the in-memory record of recent deletes.
    after = cli_json(server, "messages", "history", queue_name, sent["id"])
    assert after["deleted"] is True and after["deliveries"][0]["ended"]["how"] == "deleted"
    table = run_cli(server, "messages", "history", queue_name, sent["id"]).stdout
    assert table.startswith(f"message {sent['id']} (seq {sent['seq']}): 1 deliver"), table
    # And by its seq, as the README shows it, though the queue holds it no more.
    by_seq = cli_json(server, "messages", "history", queue_name, str(sent["seq"]))
    assert by_seq["deleted"] is True and by_seq["id"] == sent["id"], by_seq
    run_cli(server, "messages", "history", queue_name, "424242", check=4)
    # A deleted message that was never delivered has no history kept: not found, by seq as by id.
    run_cli(server, "messages", "history", queue_name, str(never["seq"]), check=4)


def test_message_usage_errors(server, queue_name):
    run_cli(server, "messages", "send", queue_name, check=2)  # neither body nor --file
    run_cli(server, "messages", "send", queue_name, "x", "--attribute", "bad", check=2)
    run_cli(server, "messages", "delete", queue_name, check=2)  # neither seq/id nor --receipt
    run_cli(server, "messages", "update", queue_name, "--receipt", "r", check=2)  # no --visibility-timeout
    run_cli(server, "messages", "peek", "/nameless", check=2)


# --- exit codes -----------------------------------------------------------------------------------------


def test_usage_errors_exit_2(server):
    run_cli(server, "queues", check=2)
    run_cli(server, "queues", "frobnicate", check=2)
    run_cli(server, "--output", "yaml", "queues", "list", check=2)
    run_cli(server, "top", "--interval", "0", check=2)
    proc = run_cli(server, "queues", "list", endpoint="localhost:9325", check=2)
    assert "http://" in proc.stderr


def test_an_unreachable_endpoint_exits_3(server):
    proc = run_cli(server, "queues", "list", endpoint=f"http://127.0.0.1:{free_port()}", check=3)
    assert proc.stderr.startswith("error: cannot reach http://127.0.0.1:")


@pytest.mark.parametrize("port", ["port", "azure_port", "kubemq_port"])
def test_the_cli_pointed_at_a_protocol_port_says_it_is_not_the_admin_endpoint(server, port):
    endpoint = f"http://127.0.0.1:{getattr(server, port)}"
    proc = run_cli(server, "queues", "list", endpoint=endpoint, check=3)
    assert "<?xml" not in proc.stdout and proc.stdout == "", proc.stdout
    assert f"{endpoint} is not a Veil admin endpoint" in proc.stderr, proc.stderr
    assert "9325" in proc.stderr and "--admin-listen" in proc.stderr, proc.stderr
    if port == "kubemq_port":
        # gRPC speaks HTTP/2 only: the CLI says so rather than "invalid HTTP version".
        assert "HTTP/2" in proc.stderr and "gRPC" in proc.stderr, proc.stderr


def test_the_endpoint_comes_from_the_environment(server):
    env = {**os.environ, "VEIL_ENDPOINT": server.admin_endpoint}
    proc = subprocess.run([veil_bin(), "--output", "json", "queues", "list"], env=env, capture_output=True,
                          text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "queues" in json.loads(proc.stdout)


def test_a_missing_queue_exits_4_everywhere(server, queue_name):
    for args in (["queues", "stats", queue_name], ["queues", "delete", queue_name, "--yes"],
                 ["queues", "purge", queue_name, "--yes"], ["messages", "peek", queue_name],
                 ["messages", "send", queue_name, "x"], ["messages", "receive", queue_name],
                 ["redrive", queue_name, "--status"], ["export", queue_name]):
        proc = run_cli(server, *args, check=4)
        assert proc.stderr.startswith("error: QueueNotFound: "), (args, proc.stderr)
    run_cli(server, "import", queue_name, stdin='{"body_base64": "eA=="}\n', check=4)


def test_help_documents_exit_codes_and_examples(server):
    top = run_cli(server, "--help").stdout
    for line in ("0  success", "1  the server refused", "2  usage error", "3  the endpoint cannot be reached",
                 "4  not found"):
        assert line in top
    for args in (["queues", "purge"], ["messages", "send"], ["redrive"], ["top"], ["export"], ["import"]):
        assert "Examples:" in run_cli(server, *args, "--help").stdout, args
    assert "new id" in run_cli(server, "import", "--help").stdout


# --- top ------------------------------------------------------------------------------------------------


def test_top_one_iteration(server, sqs, queue_name):
    sqs.create_queue(QueueName=queue_name)
    run_cli(server, "messages", "send", queue_name, "x")
    proc = run_cli(server, "top", "--iterations", "1")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("veil top")
    assert "\x1b" not in proc.stdout, "escape codes written into a pipe"
    row = next(line.split() for line in lines if queue_name in line)
    assert row[:3] == ["default", queue_name, "1"]
    assert row[-3:] == ["-", "-", "-"], "no rates before a second frame"

    frames = run_cli(server, "--output", "json", "top", "--iterations", "2", "--interval", "0.1").stdout
    decoder = json.JSONDecoder()
    first, end = decoder.raw_decode(frames)
    second, _ = decoder.raw_decode(frames[end:].lstrip())
    assert any(q["name"] == queue_name for q in first["queues"])
    assert any(q["name"] == queue_name for q in second["queues"])


def test_top_shows_rates_over_the_interval_sorted_and_filtered(server, sqs, queue_name):
    busy, idle = f"{queue_name}-busy", f"{queue_name}-idle"
    busy_url = sqs.create_queue(QueueName=busy)["QueueUrl"]
    sqs.create_queue(QueueName=idle)
    sqs.create_queue(QueueName=f"other-{queue_name}")
    stop = threading.Event()

    def send():
        while not stop.is_set():
            sqs.send_message(QueueUrl=busy_url, MessageBody="tick")
            time.sleep(0.01)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        proc = run_cli(server, "top", "--iterations", "2", "--interval", "1", "--prefix", queue_name,
                       "--sort", "sent")
    finally:
        stop.set()
        sender.join()
    frames = proc.stdout.split("veil top")[1:]
    assert len(frames) == 2, proc.stdout
    rows = [line.split() for line in frames[1].splitlines() if line.startswith("default ")]
    assert [r[1] for r in rows] == [busy, idle], "sorted by sent/s, only the prefix's queues"
    header = next(line.split() for line in frames[1].splitlines() if line.startswith("NAMESPACE"))
    sent_col = header.index("SENT/S")
    assert float(rows[0][sent_col]) > 5, rows[0]
    assert float(rows[1][sent_col]) == 0.0, rows[1]


def test_messages_tail_prints_new_messages_without_receiving_them(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    run_cli(server, "messages", "send", queue_name, "before the tail")
    tail = subprocess.Popen(
        [veil_bin(), "--endpoint", server.admin_endpoint, "--output", "json", "messages", "tail", queue_name,
         "--interval", "0.2", "--count", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        # Printed once the tail has read where the queue ends: what is sent from here on is new to it.
        assert tail.stderr.readline().startswith("tailing "), "the tail did not start"
        for i in range(3):
            run_cli(server, "messages", "send", queue_name, f"new {i}")
        out, err = tail.communicate(timeout=TIMEOUT)
    finally:
        tail.kill()
    assert tail.returncode == 0, err
    printed = [json.loads(line) for line in out.splitlines()]
    assert [m["body"] for m in printed] == ["new 0", "new 1", "new 2"]
    assert all(m["receive_count"] == 0 for m in peek_all(server, queue_name)), "the tail received"
    first = run_cli(server, "messages", "tail", queue_name, "--from-start", "--count", "1")
    assert "before the tail" in first.stdout, first.stdout


# --- redrive --------------------------------------------------------------------------------------------


def test_redrive_a_dead_letter_queue_back_to_its_source(server, sqs, queue_name):
    dlq_url = sqs.create_queue(QueueName=f"{queue_name}-dlq")["QueueUrl"]
    dlq_arn = queue_attrs(sqs, dlq_url, "QueueArn")["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})
    src_url = sqs.create_queue(QueueName=queue_name, Attributes={"RedrivePolicy": policy})["QueueUrl"]
    for i in range(5):
        sqs.send_message(QueueUrl=src_url, MessageBody=f"poison {i}")
    for _ in range(2):
        for _ in range(5):
            sqs.receive_message(QueueUrl=src_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    assert len(peek_all(server, f"{queue_name}-dlq")) == 5, "the messages did not move to the DLQ"
    assert peek_all(server, queue_name) == []

    done = cli_json(server, "redrive", f"{queue_name}-dlq", "--wait")
    assert done["status"] == "completed"
    assert done["moved"] == 5 and done["to_move"] == 5
    assert sorted(m["body"] for m in peek_all(server, queue_name)) == [f"poison {i}" for i in range(5)]
    assert peek_all(server, f"{queue_name}-dlq") == []

    tasks = cli_json(server, "redrive", f"{queue_name}-dlq", "--status")["redrives"]
    assert tasks[0]["id"] == done["id"] and tasks[0]["status"] == "completed"
    assert run_cli(server, "redrive", f"{queue_name}-dlq", "--status").stdout.splitlines()[0].split()[:2] == [
        "ID", "STATUS"]

    # Cancelling a finished redrive is refused; an unknown one is not found.
    run_cli(server, "redrive", f"{queue_name}-dlq", "--cancel", done["id"], check=1)
    run_cli(server, "redrive", f"{queue_name}-dlq", "--cancel", "00000000-0000-0000-0000-000000000000", check=4)


def test_redrive_to_a_queue_at_a_rate_and_cancel(server, queue_name):
    run_cli(server, "queues", "create", f"{queue_name}-dlq")
    run_cli(server, "queues", "create", f"{queue_name}-to")
    for i in range(20):
        run_cli(server, "messages", "send", f"{queue_name}-dlq", f"m{i}")
    started = cli_json(server, "redrive", f"{queue_name}-dlq", "--to", f"{queue_name}-to", "--rate", "1")
    assert started["status"] == "running"
    assert started["destination"] == {"namespace": "default", "name": f"{queue_name}-to"}
    assert started["rate_per_s_max"] == 1
    cancelled = cli_json(server, "redrive", f"{queue_name}-dlq", "--cancel", started["id"])
    assert cancelled["status"] == "cancelled"
    run_cli(server, "redrive", f"{queue_name}-dlq", "--status", "--to", "x", check=2)


def test_a_redrive_of_a_queue_that_is_no_dead_letter_queue_is_refused_up_front(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    run_cli(server, "messages", "send", queue_name, "never dead-lettered")
    proc = run_cli(server, "redrive", queue_name, check=1)
    assert proc.stderr.startswith("error: NotADeadLetterQueue: "), proc.stderr
    assert "--to" in proc.stderr and "not dead-lettered" in proc.stderr, proc.stderr
    # Nothing started, in the CLI's view and in the admin API's.
    assert cli_json(server, "redrive", queue_name, "--status")["redrives"] == []
    resp = requests.post(f"{server.admin_endpoint}/api/v1/queues/default/{queue_name}/redrive", json={}, timeout=10)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "NotADeadLetterQueue", resp.text
    # An empty queue that is no dead-letter queue is refused the same way.
    run_cli(server, "queues", "create", f"{queue_name}-empty")
    empty = run_cli(server, "redrive", f"{queue_name}-empty", check=1)
    assert "holds no visible message" in empty.stderr, empty.stderr
    # With a target there is somewhere to go: it runs.
    run_cli(server, "queues", "create", f"{queue_name}-to")
    done = cli_json(server, "redrive", queue_name, "--to", f"{queue_name}-to", "--wait")
    assert done["status"] == "completed" and done["moved"] == 1


def test_a_redrive_of_dead_lettered_messages_whose_rule_was_removed_still_goes_back(server, sqs, queue_name):
    dlq_url = sqs.create_queue(QueueName=f"{queue_name}-dlq")["QueueUrl"]
    dlq_arn = queue_attrs(sqs, dlq_url, "QueueArn")["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})
    src_url = sqs.create_queue(QueueName=queue_name, Attributes={"RedrivePolicy": policy})["QueueUrl"]
    sqs.send_message(QueueUrl=src_url, MessageBody="poison")
    for _ in range(2):
        sqs.receive_message(QueueUrl=src_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    assert len(peek_all(server, f"{queue_name}-dlq")) == 1
    sqs.set_queue_attributes(QueueUrl=src_url, Attributes={"RedrivePolicy": ""})
    # No queue names the DLQ any more, but its message records where it came from.
    done = cli_json(server, "redrive", f"{queue_name}-dlq", "--wait")
    assert done["status"] == "completed" and done["moved"] == 1
    assert [m["body"] for m in peek_all(server, queue_name)] == ["poison"]


# --- export / import ------------------------------------------------------------------------------------


def test_export_import_round_trip(server, sqs, queue_name):
    src, dst = f"{queue_name}-src", f"{queue_name}-dst"
    run_cli(server, "queues", "create", f"{src}.fifo", "--fifo")
    run_cli(server, "queues", "create", f"{dst}.fifo", "--fifo")
    bodies = []
    for i in range(25):
        body = f"message {i} ✓"
        bodies.append(body)
        run_cli(server, "messages", "send", f"{src}.fifo", body, "--group", f"g{i % 3}", "--dedup-id", f"d{i}",
                "--attribute", f"i=Number:{i}", "--attribute", "kind=String:test")
    # One in flight: a plain export skips it, --all-states includes it; neither receives anything.
    cli_json(server, "messages", "receive", f"{src}.fifo", "--visibility-timeout", "600")

    visible = run_cli(server, "export", f"{src}.fifo").stdout.splitlines()
    assert len(visible) == 1 + 24  # the header, then the visible messages
    exported = run_cli(server, "export", f"{src}.fifo", "--all-states").stdout.splitlines()
    assert len(exported) == 1 + 25
    header = json.loads(exported[0])
    assert header["veil_export"] == 1 and header["queue"] == f"default/{src}.fifo" and header["fifo"] is True
    lines = [json.loads(line) for line in exported[1:]]
    assert set(lines[0]) == {"id", "body_base64", "attributes", "group", "dedup_id", "sent_at_ms", "receive_count"}
    assert sorted(m["receive_count"] for m in lines) == [0] * 24 + [1]
    assert [m["receive_count"] for m in peek_all(server, f"{src}.fifo")].count(1) == 1, "export received"

    proc = run_cli(server, "--output", "json", "import", f"{dst}.fifo", stdin="\n".join(exported) + "\n")
    sent = json.loads(proc.stdout)["sent"]
    assert len(sent) == 25
    copied = peek_all(server, f"{dst}.fifo")
    by_body = {base64.b64decode(m["body_base64"]).decode(): m for m in copied}
    assert sorted(by_body) == sorted(bodies)
    for original in lines:
        body = base64.b64decode(original["body_base64"]).decode()
        copy = by_body[body]
        assert copy["attributes"] == original["attributes"]
        assert copy["group"] == original["group"]
        assert copy["dedup_id"] == original["dedup_id"]
        assert copy["receive_count"] == 0
        assert copy["id"] != original["id"], "ids are new on import"


def test_import_in_batches_of_at_most_1000(server, queue_name, tmp_path):
    run_cli(server, "queues", "create", queue_name)
    path = tmp_path / "many.jsonl"
    path.write_text("".join(
        json.dumps({"body_base64": base64.b64encode(f"n{i}".encode()).decode()}) + "\n" for i in range(2500)))
    with open(path) as stdin:
        proc = subprocess.run([veil_bin(), "--endpoint", server.admin_endpoint, "import", queue_name],
                              stdin=stdin, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"imported 2500 messages into default/{queue_name} (new ids)"
    assert cli_json(server, "queues", "stats", queue_name)["queue"]["visible"] == 2500
    exported = run_cli(server, "export", queue_name).stdout.splitlines()
    assert len(exported) == 1 + 2500


def test_import_create_makes_the_target_like_the_source_as_the_readme_shows(server, queue_name, tmp_path):
    src, copy = f"{queue_name}-orders", f"{queue_name}-copy"
    run_cli(server, "queues", "create", src, "--visibility-timeout", "45", "--delay", "0", "--retention", "86400")
    for i in range(3):
        run_cli(server, "messages", "send", src, f"o{i}")
    # The README's line, as written, but for these queue names.
    line = f"veil export {src} > orders.jsonl && veil import {copy} --create < orders.jsonl"
    env = {**os.environ, "VEIL_ENDPOINT": server.admin_endpoint, "PATH": f"{Path(veil_bin()).resolve().parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert f"created default/{copy} with the settings of default/{src}" in done.stderr
    stats = cli_json(server, "queues", "stats", copy)
    assert stats["settings"]["visibility_timeout_s"] == 45 and stats["settings"]["retention_s"] == 86400
    assert sorted(m["body"] for m in peek_all(server, copy)) == ["o0", "o1", "o2"]
    # Again into the existing queue: imported as it is, nothing recreated.
    again = subprocess.run(["bash", "-c", f"veil import {copy} --create < orders.jsonl"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert again.returncode == 0 and "exists: importing into it" in again.stderr, again.stderr
    assert len(peek_all(server, copy)) == 6
    # Without --create a missing target is still not found.
    run_cli(server, "import", f"{copy}-missing", stdin=(tmp_path / "orders.jsonl").read_text(), check=4)


def test_import_of_a_malformed_line_is_a_usage_error(server, queue_name):
    run_cli(server, "queues", "create", queue_name)
    proc = run_cli(server, "import", queue_name, stdin='{"body_base64": "eA=="}\nnot json\n', check=2)
    assert "line 2" in proc.stderr
