"""Message move tasks (docs/semantics.md §8) through boto3 and the aws CLI: StartMessageMoveTask
redrives a dead-letter queue back to the queues its messages came from or to a destination, at most
MaxNumberOfMessagesPerSecond; ListMessageMoveTasks shows the tasks most recent first; CancelMessageMoveTask stops
one; AWS's error codes and texts; and a kill -9 in the middle of a task, after which the restarted server finishes
it with every message in its source exactly once."""

import json
import time

import pytest

from helpers import (TEST_CLOCK_ARGS, VeilServer, advance_clock, counts, drain, expect_error, make_client,
                     queue_attrs, receive, wait_until)

NOT_FOUND = "ResourceNotFoundException"


@pytest.fixture(scope="module")
def server(veil_path, tmp_path_factory):
    """The module's server on the test clock (docs/testing.md "Test clock"), so that a test can move time
    on past a cancel and see that no step moves anything more."""
    base = tmp_path_factory.mktemp("veil-move-tasks")
    srv = VeilServer(base / "data", log_dir=base, extra_args=TEST_CLOCK_ARGS).start()
    yield srv
    assert srv.running(), f"veil died during the tests of this module\n{srv.log_tail()}"
    srv.stop_cleanly()


def qarn(sqs, url) -> str:
    return queue_attrs(sqs, url, "QueueArn")["QueueArn"]


@pytest.fixture
def redrive_pair(sqs, new_queue):
    """(source URL, DLQ URL, DLQ ARN): a message moves to the DLQ on the receive after its first."""
    dlq = new_queue("dlq")
    dlq_arn = qarn(sqs, dlq)
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})
    src = new_queue("src", RedrivePolicy=policy)
    return src, dlq, dlq_arn


def dead_letter(sqs, src, bodies):
    """Sends `bodies` to `src` and receives until every one of them has moved to its DLQ."""
    for start in range(0, len(bodies), 10):
        entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start:start + 10])]
        assert not sqs.send_message_batch(QueueUrl=src, Entries=entries).get("Failed")
    for _ in range(4 * len(bodies)):
        if counts(sqs, src) == (0, 0, 0):
            return
        receive(sqs, src, MaxNumberOfMessages=10, VisibilityTimeout=0)
    raise AssertionError(f"messages did not reach the DLQ: {counts(sqs, src)} left in the source")


def tasks(sqs, source_arn, max_results=10) -> list:
    return sqs.list_message_move_tasks(SourceArn=source_arn, MaxResults=max_results)["Results"]


def wait_finished(sqs, source_arn, timeout=5.0) -> dict:
    """The most recent task once it is no longer RUNNING."""
    deadline = time.monotonic() + timeout
    while True:
        task = tasks(sqs, source_arn, 1)[0]
        if task["Status"] != "RUNNING":
            return task
        assert time.monotonic() < deadline, f"the task is still running after {timeout}s: {task}"
        time.sleep(0.05)


def bodies_of(sqs, url) -> list:
    return sorted(m["Body"] for m in drain(sqs, url))


def test_a_task_without_destination_redrives_each_message_to_its_source(sqs, redrive_pair):
    src, dlq, dlq_arn = redrive_pair
    dead_letter(sqs, src, ["a", "b", "c"])
    assert counts(sqs, dlq) == (3, 0, 0)

    handle = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
    task = wait_finished(sqs, dlq_arn)

    assert handle
    assert task["Status"] == "COMPLETED"
    assert (task["ApproximateNumberOfMessagesMoved"], task["ApproximateNumberOfMessagesToMove"]) == (3, 3)
    assert task["SourceArn"] == dlq_arn
    assert "DestinationArn" not in task and "TaskHandle" not in task and "FailureReason" not in task
    assert abs(task["StartedTimestamp"] - time.time() * 1000) < 60_000, "StartedTimestamp is epoch milliseconds"
    back = receive(sqs, src, MaxNumberOfMessages=10, AttributeNames=["All"])
    assert sorted(m["Body"] for m in back) == ["a", "b", "c"]
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in back} == {"1"}, "a redriven message starts afresh"
    assert counts(sqs, dlq) == (0, 0, 0)


def test_a_task_moves_to_its_destination_at_most_its_rate(sqs, redrive_pair, new_queue):
    src, dlq, dlq_arn = redrive_pair
    target = new_queue("target")
    target_arn = qarn(sqs, target)
    dead_letter(sqs, src, [f"m{i}" for i in range(6)])

    started = time.monotonic()
    handle = sqs.start_message_move_task(
        SourceArn=dlq_arn, DestinationArn=target_arn, MaxNumberOfMessagesPerSecond=5)["TaskHandle"]
    running = tasks(sqs, dlq_arn)[0]
    assert (running["Status"], running["TaskHandle"]) == ("RUNNING", handle)
    assert (running["DestinationArn"], running["MaxNumberOfMessagesPerSecond"]) == (target_arn, 5)
    # The task's progress at every moment, not only its average: a task starts with one message of allowance
    # and earns five a second (docs/semantics.md §8), so by any moment it has moved at most 1 + 5 × the seconds
    # since its start. Each count was read by the server after `started` and before the time noted beside it,
    # so a slow machine only loosens the bound.
    samples = []
    while True:
        task = tasks(sqs, dlq_arn, 1)[0]
        samples.append((time.monotonic() - started, task["ApproximateNumberOfMessagesMoved"]))
        if task["Status"] != "RUNNING":
            break
        assert samples[-1][0] < 10, f"the task is still running after 10 s: {task}"
        time.sleep(0.05)

    assert (task["Status"], task["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 6)
    too_fast = [(round(seconds, 2), moved) for seconds, moved in samples if moved > 1 + 5 * seconds]
    assert not too_fast, f"moved faster than 5 per second (seconds since the start, moved): {too_fast}"
    assert bodies_of(sqs, target) == [f"m{i}" for i in range(6)]
    assert counts(sqs, dlq) == (0, 0, 0)
    assert counts(sqs, src) == (0, 0, 0)


def test_a_cancelled_task_stops_and_cannot_be_cancelled_again(sqs, server, redrive_pair):
    src, dlq, dlq_arn = redrive_pair
    dead_letter(sqs, src, [f"m{i}" for i in range(10)])
    started = time.monotonic()
    handle = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
    # The task starts with one message of allowance: its first step moves one.
    wait_until(lambda: tasks(sqs, dlq_arn, 1)[0]["ApproximateNumberOfMessagesMoved"] >= 1,
               "the task's first message moved")

    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    elapsed = time.monotonic() - started
    task = tasks(sqs, dlq_arn)[0]
    assert 1 <= moved <= 1 + elapsed, f"{moved} moved in {elapsed:.2f}s at 1 per second"
    assert (task["Status"], task["ApproximateNumberOfMessagesMoved"]) == ("CANCELLED", moved)
    assert "TaskHandle" not in task
    # Ten seconds on the server's clock, and a move-task step run at that time before the advance answers: a
    # task still running would move (at most its one second's allowance) in that step.
    advance_clock(server, 10)
    assert counts(sqs, dlq) == (10 - moved, 0, 0), "something moved after the cancel"
    expect_error(sqs.cancel_message_move_task, NOT_FOUND, 404, "Task does not exist.", TaskHandle=handle)


def test_one_task_runs_per_source_and_tasks_list_most_recent_first(sqs, redrive_pair):
    src, dlq, dlq_arn = redrive_pair
    dead_letter(sqs, src, ["x", "y"])
    first = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
    expect_error(
        sqs.start_message_move_task, "InvalidParameterValue", 400,
        "There is already a task running. Only one active task is allowed for a source queue arn at a given time.",
        SourceArn=dlq_arn)
    sqs.cancel_message_move_task(TaskHandle=first)
    sqs.start_message_move_task(SourceArn=dlq_arn)
    wait_finished(sqs, dlq_arn)

    assert [t["Status"] for t in tasks(sqs, dlq_arn)] == ["COMPLETED", "CANCELLED"]
    assert len(sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]) == 1, "MaxResults defaults to 1"


def test_start_errors_carry_aws_codes_and_texts(sqs, redrive_pair, new_queue):
    src, _dlq, dlq_arn = redrive_pair
    missing = dlq_arn + "-missing"
    expect_error(sqs.start_message_move_task, "InvalidParameterValue", 400,
                 "Source queue must be configured as a Dead Letter Queue.", SourceArn=qarn(sqs, src))
    expect_error(sqs.start_message_move_task, NOT_FOUND, 404,
                 "The resource that you specified for the SourceArn parameter doesn't exist.", SourceArn=missing)
    expect_error(sqs.start_message_move_task, "InvalidParameterValue", 400,
                 "You must use this format to specify the SourceArn: "
                 "arn:<partition>:<service>:<region>:<account-id>:<resource-id>", SourceArn="not-an-arn")
    expect_error(sqs.start_message_move_task, NOT_FOUND, 404,
                 "The resource that you specified for the DestinationArn parameter doesn't exist.",
                 SourceArn=dlq_arn, DestinationArn=missing)
    for rate in (0, 501):
        expect_error(sqs.start_message_move_task, "InvalidParameterValue", 400,
                     "Value for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: You must enter a number "
                     "that's between 1 and 500.", SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=rate)
    expect_error(sqs.list_message_move_tasks, NOT_FOUND, 404, SourceArn=missing)
    expect_error(sqs.cancel_message_move_task, "InvalidParameterValue", 400,
                 "Value for parameter TaskHandle is invalid.", TaskHandle="foobared")


def test_a_message_sent_to_the_dlq_directly_fails_a_task_without_destination(sqs, redrive_pair):
    _src, dlq, dlq_arn = redrive_pair
    sqs.send_message(QueueUrl=dlq, MessageBody="no origin")
    sqs.start_message_move_task(SourceArn=dlq_arn)
    task = wait_finished(sqs, dlq_arn)
    assert (task["Status"], task["FailureReason"]) == ("FAILED", "CouldNotDetermineMessageSource")
    assert task["ApproximateNumberOfMessagesMoved"] == 0
    assert counts(sqs, dlq) == (1, 0, 0)


def test_the_aws_cli_starts_lists_and_cancels_move_tasks(aws, sqs, redrive_pair, new_queue):
    src, dlq, dlq_arn = redrive_pair
    target_arn = qarn(sqs, new_queue("target"))
    dead_letter(sqs, src, [f"m{i}" for i in range(20)])

    handle = aws("start-message-move-task", "--source-arn", dlq_arn, "--destination-arn", target_arn,
                 "--max-number-of-messages-per-second", "1")["TaskHandle"]
    listed = aws("list-message-move-tasks", "--source-arn", dlq_arn, "--max-results", "10")["Results"]
    assert [(t["Status"], t["TaskHandle"], t["DestinationArn"]) for t in listed] == [("RUNNING", handle, target_arn)]
    moved = aws("cancel-message-move-task", "--task-handle", handle)["ApproximateNumberOfMessagesMoved"]
    assert 1 <= moved < 20, "one per second: a CLI call or two takes a few of those seconds, not twenty"
    assert aws("list-message-move-tasks", "--source-arn", dlq_arn)["Results"][0]["Status"] == "CANCELLED"

    refused = aws("cancel-message-move-task", "--task-handle", handle, check=False)
    assert refused.returncode != 0
    assert "ResourceNotFoundException" in refused.stderr and "Task does not exist." in refused.stderr
    refused = aws("start-message-move-task", "--source-arn", qarn(sqs, src), check=False)
    assert refused.returncode != 0 and "Source queue must be configured as a Dead Letter Queue." in refused.stderr


def test_kill_9_mid_task_leaves_every_message_exactly_once_after_the_restart(make_server):
    srv = make_server()
    c = make_client(srv.endpoint)
    dlq = c.create_queue(QueueName="crash-dlq")["QueueUrl"]
    dlq_arn = qarn(c, dlq)
    src = c.create_queue(QueueName="crash-src", Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})})["QueueUrl"]
    bodies = [f"m{i:02}" for i in range(60)]
    dead_letter(c, src, bodies)
    assert counts(c, dlq) == (60, 0, 0)

    c.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=20)
    time.sleep(1.0)
    srv.kill()
    srv.start()
    c = make_client(srv.endpoint)

    during = tasks(c, dlq_arn)[0]
    assert during["Status"] == "RUNNING", during
    assert 0 < during["ApproximateNumberOfMessagesMoved"] < 60, during
    task = wait_finished(c, dlq_arn, timeout=6.0)
    assert (task["Status"], task["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 60)

    back = drain(c, src)
    ids = [m["MessageId"] for m in back]
    assert len(ids) == len(set(ids)), "a message arrived twice"
    assert sorted(m["Body"] for m in back) == bodies, "every message is back in its source, once"
    assert counts(c, dlq) == (0, 0, 0), "the DLQ is empty"
    srv.stop_cleanly()
