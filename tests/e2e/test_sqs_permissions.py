"""AddPermission and RemovePermission against the real binary, with boto3 (JSON protocol), raw Query requests and
the aws CLI: each edits the queue's Policy attribute one statement per label, rendered as SQS renders it (a
compact document, version 2008-10-17, id `<queue arn>/SQSDefaultPolicy`, `SQS:` actions, `arn:aws:iam::<id>:root`
principals, a string for one and a list for several); the last statement's removal removes the policy; AWS's
errors for a duplicate or unknown label, too many or ungrantable actions, unverifiable or missing accounts, a bad
label and a missing queue; and the policy survives kill -9 (stored with the queue, durable before the answer).
Veil stores and returns the policy; it does not enforce it (docs/semantics.md §SQS)."""

import json

import pytest

from helpers import ACCOUNT, arn, expect_error, make_client, parse_xml, query_call, query_error, queue_attrs

NONEXISTENT = "AWS.SimpleQueueService.NonExistentQueue"
A1, A2 = "111111111111", "222222222222"


def root(account: str) -> str:
    return f"arn:aws:iam::{account}:root"


def statement(name: str, sid: str, principal, action) -> dict:
    return {"Sid": sid, "Effect": "Allow", "Principal": {"AWS": principal}, "Action": action,
            "Resource": arn(name)}


def policy_text(name: str, *statements: dict) -> str:
    """The exact text SQS answers: compact JSON, members in SQS's order."""
    document = {"Version": "2008-10-17", "Id": f"{arn(name)}/SQSDefaultPolicy", "Statement": list(statements)}
    return json.dumps(document, separators=(",", ":"))


def policy(sqs, url):
    """The queue's Policy attribute, or None when GetQueueAttributes shows none."""
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"]).get("Attributes", {}).get("Policy")


def invalid(label_or_value: str, parameter: str, reason: str) -> str:
    return f"Value {label_or_value} for parameter {parameter} is invalid. Reason: {reason}"


def test_add_permission_writes_the_policy_exactly_as_sqs_renders_it(sqs, queue_url, queue_name):
    sqs.add_permission(QueueUrl=queue_url, Label="SendFromA1", AWSAccountIds=[A1], Actions=["SendMessage"])
    assert policy(sqs, queue_url) == policy_text(
        queue_name, statement(queue_name, "SendFromA1", root(A1), "SQS:SendMessage"))


def test_several_accounts_or_actions_are_lists_in_request_order(sqs, queue_url, queue_name):
    sqs.add_permission(QueueUrl=queue_url, Label="both", AWSAccountIds=[A2, A1],
                       Actions=["ReceiveMessage", "DeleteMessage", "*"])
    assert policy(sqs, queue_url) == policy_text(queue_name, statement(
        queue_name, "both", [root(A2), root(A1)], ["SQS:ReceiveMessage", "SQS:DeleteMessage", "SQS:*"]))


def test_a_second_label_adds_a_statement_and_removing_one_keeps_the_other(sqs, queue_url, queue_name):
    sqs.add_permission(QueueUrl=queue_url, Label="first", AWSAccountIds=[A1], Actions=["ReceiveMessage"])
    sqs.add_permission(QueueUrl=queue_url, Label="second", AWSAccountIds=[A2], Actions=["SendMessage"])
    first = statement(queue_name, "first", root(A1), "SQS:ReceiveMessage")
    second = statement(queue_name, "second", root(A2), "SQS:SendMessage")
    assert policy(sqs, queue_url) == policy_text(queue_name, first, second)

    sqs.remove_permission(QueueUrl=queue_url, Label="first")
    assert policy(sqs, queue_url) == policy_text(queue_name, second)
    # `All` shows it too.
    assert queue_attrs(sqs, queue_url)["Policy"] == policy_text(queue_name, second)


def test_removing_the_last_statement_removes_the_policy(sqs, queue_url):
    sqs.add_permission(QueueUrl=queue_url, Label="only", AWSAccountIds=[A1], Actions=["*"])
    sqs.remove_permission(QueueUrl=queue_url, Label="only")
    assert policy(sqs, queue_url) is None
    assert "Policy" not in queue_attrs(sqs, queue_url)


def test_a_label_already_used_is_invalid_and_changes_nothing(sqs, queue_url):
    sqs.add_permission(QueueUrl=queue_url, Label="dup", AWSAccountIds=[A1], Actions=["SendMessage"])
    before = policy(sqs, queue_url)
    expect_error(sqs.add_permission, "InvalidParameterValue", message=invalid("dup", "Label", "Already exists."),
                 QueueUrl=queue_url, Label="dup", AWSAccountIds=[A2], Actions=["ReceiveMessage"])
    assert policy(sqs, queue_url) == before


def test_an_unknown_label_is_worded_by_whether_the_queue_has_a_policy(sqs, queue_url):
    resp = expect_error(sqs.remove_permission, "InvalidParameterValue", QueueUrl=queue_url, Label="nope")
    assert resp["Error"]["Message"] == invalid("nope", "Label", "can't find label.")
    sqs.add_permission(QueueUrl=queue_url, Label="some", AWSAccountIds=[A1], Actions=["*"])
    resp = expect_error(sqs.remove_permission, "InvalidParameterValue", QueueUrl=queue_url, Label="nope")
    assert resp["Error"]["Message"] == invalid("nope", "Label", "can't find label on existing policy.")


def test_more_than_7_actions_is_over_limit_403(sqs, queue_url):
    sqs.add_permission(QueueUrl=queue_url, Label="seven", AWSAccountIds=[A1], Actions=["SendMessage"] * 7)
    resp = expect_error(sqs.add_permission, "OverLimit", status=403, QueueUrl=queue_url, Label="eight",
                        AWSAccountIds=[A1], Actions=["SendMessage"] * 8)
    assert resp["Error"]["Message"] == "8 Actions were found, maximum allowed is 7."


@pytest.mark.parametrize("action, reason", [
    ("RemovePermission", "Only the queue owner is allowed to invoke this action."),
    ("SetQueueAttributes", "Only the queue owner is allowed to invoke this action."),
    ("SendMessageBatch", "Please refer to the appropriate WSDL for a list of valid actions."),
    ("sendmessage", "Please refer to the appropriate WSDL for a list of valid actions."),
], ids=["owner-only", "owner-only-attributes", "batch-name", "wrong-case"])
def test_only_actions_another_account_may_call_are_granted(sqs, queue_url, action, reason):
    resp = expect_error(sqs.add_permission, "InvalidParameterValue", QueueUrl=queue_url, Label="l",
                        AWSAccountIds=[A1], Actions=["SendMessage", action])
    assert resp["Error"]["Message"] == invalid(f"SQS:{action}", "ActionName", reason)
    assert policy(sqs, queue_url) is None


@pytest.mark.parametrize("accounts, shown", [
    ([], "[]"),
    (["12345"], "[12345]"),
    ([A1, "arn:aws:iam::111111111111:user/x"], "[arn:aws:iam::111111111111:user/x]"),
], ids=["none", "short", "user-arn"])
def test_accounts_must_be_12_digit_ids(sqs, queue_url, accounts, shown):
    resp = expect_error(sqs.add_permission, "InvalidParameterValue", QueueUrl=queue_url, Label="l",
                        AWSAccountIds=accounts, Actions=["SendMessage"])
    assert resp["Error"]["Message"] == invalid(shown, "PrincipalId", "Unable to verify.")


def test_no_actions_is_a_missing_parameter(sqs, queue_url):
    resp = expect_error(sqs.add_permission, "MissingParameter", QueueUrl=queue_url, Label="l",
                        AWSAccountIds=[A1], Actions=[])
    assert resp["Error"]["Message"] == "The request must contain the parameter Actions."


@pytest.mark.parametrize("label", ["has space", "dot.ted", "x" * 81], ids=["space", "dot", "81-chars"])
def test_a_label_is_1_to_80_letters_digits_hyphens_or_underscores(sqs, queue_url, label):
    resp = expect_error(sqs.add_permission, "InvalidParameterValue", QueueUrl=queue_url, Label=label,
                        AWSAccountIds=[A1], Actions=["SendMessage"])
    assert resp["Error"]["Message"] == invalid(
        label, "Label", "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length.")
    sqs.add_permission(QueueUrl=queue_url, Label="x" * 80, AWSAccountIds=[A1], Actions=["SendMessage"])


def test_permissions_on_a_missing_queue_are_nonexistent_queue(sqs, endpoint, queue_name):
    url = f"{endpoint}/{ACCOUNT}/{queue_name}-missing"
    expect_error(sqs.add_permission, NONEXISTENT, message="The specified queue does not exist", QueueUrl=url,
                 Label="l", AWSAccountIds=[A1], Actions=["SendMessage"])
    expect_error(sqs.remove_permission, NONEXISTENT, QueueUrl=url, Label="l")


def test_a_policy_set_with_set_queue_attributes_keeps_its_text_around_added_statements(sqs, queue_url, queue_name):
    own = json.dumps({"Version": "2012-10-17", "Statement": [{"Sid": "own", "Effect": "Deny", "Principal": "*",
                                                              "Action": "sqs:*", "Resource": "*"}]},
                     separators=(",", ":"))
    sqs.set_queue_attributes(QueueUrl=queue_url, Attributes={"Policy": own})
    sqs.add_permission(QueueUrl=queue_url, Label="added", AWSAccountIds=[A1], Actions=["SendMessage"])
    edited = json.loads(policy(sqs, queue_url))
    assert [s["Sid"] for s in edited["Statement"]] == ["own", "added"]
    assert edited["Statement"][1] == statement(queue_name, "added", root(A1), "SQS:SendMessage")
    expect_error(sqs.add_permission, "InvalidParameterValue", message=invalid("own", "Label", "Already exists."),
                 QueueUrl=queue_url, Label="own", AWSAccountIds=[A1], Actions=["SendMessage"])
    sqs.remove_permission(QueueUrl=queue_url, Label="added")
    assert policy(sqs, queue_url) == own


# ---- the Query protocol ----------------------------------------------------------------------------


def test_query_add_permission_reads_indexed_accounts_and_actions(sqs, endpoint, queue_url, queue_name):
    resp = query_call(endpoint, {"Action": "AddPermission", "QueueUrl": queue_url, "Label": "q",
                                 "AWSAccountId.1": A1, "AWSAccountId.2": A2,
                                 "ActionName.1": "SendMessage", "ActionName.2": "GetQueueUrl"})
    assert resp.status_code == 200, resp.text
    assert parse_xml(resp).tag == "AddPermissionResponse"
    assert policy(sqs, queue_url) == policy_text(queue_name, statement(
        queue_name, "q", [root(A1), root(A2)], ["SQS:SendMessage", "SQS:GetQueueUrl"]))

    again = query_call(endpoint, {"Action": "AddPermission", "QueueUrl": queue_url, "Label": "q",
                                  "AWSAccountId.1": A1, "ActionName.1": "SendMessage"})
    assert query_error(again) == (400, "InvalidParameterValue", invalid("q", "Label", "Already exists."))

    resp = query_call(endpoint, {"Action": "RemovePermission", "QueueUrl": queue_url, "Label": "q"})
    assert resp.status_code == 200, resp.text
    assert parse_xml(resp).tag == "RemovePermissionResponse"
    assert policy(sqs, queue_url) is None


def test_query_missing_account_list_is_missing_principal_id(endpoint, queue_url):
    resp = query_call(endpoint, {"Action": "AddPermission", "QueueUrl": queue_url, "Label": "q",
                                 "ActionName.1": "SendMessage"})
    assert query_error(resp) == (400, "MissingParameter", "The request must contain the parameter PrincipalId.")


# ---- the aws CLI -----------------------------------------------------------------------------------


def test_cli_add_and_remove_permission(aws, queue_name):
    url = aws("create-queue", "--queue-name", queue_name)["QueueUrl"]
    aws("add-permission", "--queue-url", url, "--label", "cli", "--aws-account-ids", A1, A2,
        "--actions", "SendMessage")
    shown = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "Policy")["Attributes"]["Policy"]
    assert shown == policy_text(queue_name, statement(queue_name, "cli", [root(A1), root(A2)], "SQS:SendMessage"))

    proc = aws("add-permission", "--queue-url", url, "--label", "cli", "--aws-account-ids", A1,
               "--actions", "SendMessage", check=False)
    assert proc.returncode != 0
    assert "InvalidParameterValue" in proc.stderr, proc.stderr
    assert invalid("cli", "Label", "Already exists.") in proc.stderr, proc.stderr

    aws("remove-permission", "--queue-url", url, "--label", "cli")
    assert "Attributes" not in aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "Policy")
    proc = aws("remove-permission", "--queue-url", url, "--label", "cli", check=False)
    assert proc.returncode != 0
    assert invalid("cli", "Label", "can't find label.") in proc.stderr, proc.stderr


# ---- durability ------------------------------------------------------------------------------------


def test_the_policy_survives_kill_9_and_restart(make_server):
    srv = make_server()
    c = make_client(srv.endpoint)
    name = "permissions-durable"
    url = c.create_queue(QueueName=name)["QueueUrl"]
    c.add_permission(QueueUrl=url, Label="a", AWSAccountIds=[A1], Actions=["SendMessage"])
    c.add_permission(QueueUrl=url, Label="b", AWSAccountIds=[A2], Actions=["ReceiveMessage", "DeleteMessage"])
    c.remove_permission(QueueUrl=url, Label="a")
    expected = policy_text(name, statement(name, "b", root(A2), ["SQS:ReceiveMessage", "SQS:DeleteMessage"]))
    assert policy(c, url) == expected

    srv.kill()
    srv.start()
    c = make_client(srv.endpoint)
    assert policy(c, url) == expected
    # The restored policy is the one edits apply to.
    expect_error(c.add_permission, "InvalidParameterValue", message=invalid("b", "Label", "Already exists."),
                 QueueUrl=url, Label="b", AWSAccountIds=[A1], Actions=["SendMessage"])
    c.remove_permission(QueueUrl=url, Label="b")
    assert policy(c, url) is None
