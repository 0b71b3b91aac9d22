"""SQS authentication and authorization (docs/security.md, "SQS"): SigV4 verified as AWS verifies it —
signed requests from boto3 (JSON protocol) and raw Query requests pass, tampered ones fail with AWS's codes,
presigned URLs work until they expire — session tokens, per-credential grants, and queue policies deciding
cross-account access (an explicit Deny winning)."""

from __future__ import annotations

import datetime
import json
import subprocess
import time
import urllib.parse

import boto3
import pytest
import requests
from botocore.auth import S3SigV4QueryAuth, SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

from helpers import ACCOUNT, DEFAULT_REGION, REPO, expect_error, parse_xml

OTHER_ACCOUNT = "111111111111"
CONFIG = f"""
[sqs]
[[sqs.credentials]]
access_key = "AKIDOTHER"
secret_key = "other-secret"
account_id = "{OTHER_ACCOUNT}"

[[sqs.credentials]]
access_key = "AKIDTEMP"
secret_key = "temp-secret"
account_id = "{ACCOUNT}"
session_token = "the-session-token"

[[sqs.credentials]]
access_key = "AKIDSENDER"
secret_key = "sender-secret"
account_id = "{ACCOUNT}"
grants = [{{ queues = "orders-*", permissions = ["send"] }}]

[[sqs.credentials]]
access_key = "AKIDORDERS"
secret_key = "orders-secret"
account_id = "{ACCOUNT}"
grants = [{{ queues = "orders-*", permissions = ["send", "receive", "delete", "peek", "admin"] }}]

[[sqs.credentials]]
access_key = "AKIDMOVER"
secret_key = "mover-secret"
account_id = "{ACCOUNT}"
grants = [{{ queues = "mv-dlq", permissions = ["admin"] }}, {{ queues = "mv-mine", permissions = ["send"] }}]
"""
MISMATCH = ("The request signature we calculated does not match the signature you provided. Check your AWS "
            "Secret Access Key and signing method. Consult the service documentation for details.")
INVALID_TOKEN = "The security token included in the request is invalid."


@pytest.fixture(scope="module")
def srv(veil_path, tmp_path_factory):
    from helpers import VeilServer
    base = tmp_path_factory.mktemp("veil-auth")
    config = base / "veil.toml"
    config.write_text(CONFIG)
    server = VeilServer(base / "data", log_dir=base, extra_args=["--config", str(config)]).start()
    yield server
    server.stop_cleanly()


def client(srv, key="test", secret="test", token=None):
    return boto3.client("sqs", endpoint_url=srv.endpoint, region_name=DEFAULT_REGION, aws_access_key_id=key,
                        aws_secret_access_key=secret, aws_session_token=token,
                        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))


def signed(url, body: bytes, headers: dict, *, key="test", secret="test", token=None, when=None,
           method="POST") -> dict:
    """The headers of a request signed with botocore's SigV4 at `when` (default now)."""
    req = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    auth = SigV4Auth(Credentials(key, secret, token), "sqs", DEFAULT_REGION)
    if when is None:
        auth.add_auth(req)
        return dict(req.headers.items())
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    req.context["timestamp"] = stamp
    req.headers["X-Amz-Date"] = stamp
    canonical = auth.canonical_request(req)
    signature = auth.signature(auth.string_to_sign(req, canonical), req)
    signed_headers = auth.signed_headers(auth.headers_to_sign(req))
    req.headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={key}/{auth.credential_scope(req)}, "
                                    f"SignedHeaders={signed_headers}, Signature={signature}")
    return dict(req.headers.items())


JSON_HEADERS = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"}
QUERY_HEADERS = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
QUERY_BODY = b"Action=ListQueues&Version=2012-11-05"


def json_error(resp) -> tuple[int, str, str]:
    """Status, the SQS code (x-amzn-query-error) and the message of a JSON-protocol error."""
    return resp.status_code, resp.headers.get("x-amzn-query-error", ""), resp.json().get("message", "")


def query_error(resp) -> tuple[int, str, str]:
    root = parse_xml(resp)
    return resp.status_code, root.findtext("Error/Code"), root.findtext("Error/Message")


def test_signed_boto3_and_query_requests_pass(srv):
    sqs = client(srv)
    url = sqs.create_queue(QueueName="signed-ok")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="hi")
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"][0]["Body"] == "hi"
    resp = requests.post(srv.endpoint, data=QUERY_BODY, headers=signed(srv.endpoint, QUERY_BODY, QUERY_HEADERS),
                         timeout=5)
    assert resp.status_code == 200, resp.text
    assert url in resp.text


def test_a_tampered_body_is_signature_does_not_match_in_both_protocols(srv):
    headers = signed(srv.endpoint, b"{}", JSON_HEADERS)
    resp = requests.post(srv.endpoint, data=b'{"QueueNamePrefix":"x"}', headers=headers, timeout=5)
    assert json_error(resp) == (403, "SignatureDoesNotMatch;Sender", MISMATCH)
    headers = signed(srv.endpoint, QUERY_BODY, QUERY_HEADERS)
    resp = requests.post(srv.endpoint, data=QUERY_BODY + b"&QueueNamePrefix=x", headers=headers, timeout=5)
    assert query_error(resp) == (403, "SignatureDoesNotMatch", MISMATCH)


def test_a_tampered_signed_header_is_signature_does_not_match(srv):
    headers = signed(srv.endpoint, b"{}", JSON_HEADERS)
    headers["X-Amz-Target"] = "AmazonSQS.CreateQueue"
    resp = requests.post(srv.endpoint, data=b"{}", headers=headers, timeout=5)
    assert json_error(resp)[:2] == (403, "SignatureDoesNotMatch;Sender")


def test_a_date_more_than_15_minutes_old_is_a_signature_expired(srv):
    when = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=20)
    headers = signed(srv.endpoint, QUERY_BODY, QUERY_HEADERS, when=when)
    resp = requests.post(srv.endpoint, data=QUERY_BODY, headers=headers, timeout=5)
    status, code, message = query_error(resp)
    assert (status, code) == (403, "SignatureDoesNotMatch")
    assert message.startswith(f"Signature expired: {when.strftime('%Y%m%dT%H%M%SZ')} is now earlier than ")
    assert message.endswith(" - 15 min.)")
    # Within the skew it is accepted.
    ok = signed(srv.endpoint, QUERY_BODY, QUERY_HEADERS, when=when + datetime.timedelta(minutes=10))
    assert requests.post(srv.endpoint, data=QUERY_BODY, headers=ok, timeout=5).status_code == 200


def test_a_changed_date_header_is_signature_does_not_match(srv):
    headers = signed(srv.endpoint, b"{}", JSON_HEADERS)
    stamp = datetime.datetime.strptime(headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ") + datetime.timedelta(seconds=1)
    headers["X-Amz-Date"] = stamp.strftime("%Y%m%dT%H%M%SZ")
    resp = requests.post(srv.endpoint, data=b"{}", headers=headers, timeout=5)
    assert json_error(resp)[:2] == (403, "SignatureDoesNotMatch;Sender")


def test_an_unknown_access_key_is_invalid_client_token_id(srv):
    expect_error(client(srv, key="AKIDNOBODY").list_queues, "InvalidClientTokenId", 403, INVALID_TOKEN)


def test_a_wrong_secret_is_signature_does_not_match(srv):
    expect_error(client(srv, secret="wrong").list_queues, "SignatureDoesNotMatch", 403, MISMATCH)


def test_a_request_without_signature_is_missing_authentication_token(srv):
    resp = requests.post(srv.endpoint, data=QUERY_BODY, headers=QUERY_HEADERS, timeout=5)
    assert query_error(resp) == (403, "MissingAuthenticationToken", "Request is missing Authentication Token")
    resp = requests.post(srv.endpoint, data=b"{}", headers=JSON_HEADERS, timeout=5)
    assert json_error(resp)[:2] == (403, "MissingAuthenticationToken;Sender")


def test_a_malformed_authorization_header_is_incomplete_signature(srv):
    headers = dict(QUERY_HEADERS, Authorization="AWS4-HMAC-SHA256 Credential=test/20240101/us-east-1/sqs/aws4_request")
    status, code, message = query_error(requests.post(srv.endpoint, data=QUERY_BODY, headers=headers, timeout=5))
    assert (status, code) == (400, "IncompleteSignature")
    assert message.startswith("Authorization header requires 'Signature' parameter.")


def presigned_url(srv, params: dict, expires: int, method: str = "GET", path: str = "/",
                  unsigned_payload: bool = False) -> str:
    """A URL presigned as botocore's SigV4QueryAuth does (the hash of an empty body signed), or with
    `UNSIGNED-PAYLOAD` as S3-style presigners do."""
    url = srv.endpoint + path + "?" + urllib.parse.urlencode({"Version": "2012-11-05", **params})
    req = AWSRequest(method=method, url=url)
    signer = S3SigV4QueryAuth if unsigned_payload else SigV4QueryAuth
    signer(Credentials("test", "test"), "sqs", DEFAULT_REGION, expires=expires).add_auth(req)
    return req.url


def test_a_presigned_url_works_until_it_expires_and_not_once_tampered(srv):
    client(srv).create_queue(QueueName="presigned-q")
    url = presigned_url(srv, {"Action": "GetQueueUrl", "QueueName": "presigned-q"}, 60)
    resp = requests.get(url, timeout=5)
    assert resp.status_code == 200, resp.text
    assert "presigned-q" in resp.text
    tampered = url.replace("presigned-q", "presigned-x")
    assert query_error(requests.get(tampered, timeout=5))[:2] == (403, "SignatureDoesNotMatch")
    short = presigned_url(srv, {"Action": "ListQueues"}, 1)
    time.sleep(2.1)
    assert query_error(requests.get(short, timeout=5)) == (400, "RequestExpired", "Request has expired.")


def test_temporary_credentials_need_their_session_token(srv):
    with_token = client(srv, "AKIDTEMP", "temp-secret", "the-session-token")
    url = with_token.create_queue(QueueName="temp-credentials-q")["QueueUrl"]
    assert url in with_token.list_queues(QueueNamePrefix="temp-credentials-q")["QueueUrls"]
    expect_error(client(srv, "AKIDTEMP", "temp-secret").list_queues, "InvalidClientTokenId", 403, INVALID_TOKEN)
    expect_error(client(srv, "AKIDTEMP", "temp-secret", "another").list_queues, "InvalidClientTokenId", 403)
    # A token on a credential that has none is refused too.
    expect_error(client(srv, token="unexpected").list_queues, "InvalidClientTokenId", 403)


def test_another_account_is_refused_until_add_permission_allows_it(srv):
    owner, other = client(srv), client(srv, "AKIDOTHER", "other-secret")
    url = owner.create_queue(QueueName="shared")["QueueUrl"]
    resp = expect_error(other.send_message, "AccessDenied", 403, QueueUrl=url, MessageBody="x")
    assert resp["Error"]["Message"] == (
        f"User: arn:aws:iam::{OTHER_ACCOUNT}:root is not authorized to perform: sqs:SendMessage on resource: "
        f"arn:aws:sqs:{DEFAULT_REGION}:{ACCOUNT}:shared because no resource-based policy allows the "
        f"sqs:SendMessage action")
    owner.add_permission(QueueUrl=url, Label="other-sends", AWSAccountIds=[OTHER_ACCOUNT], Actions=["SendMessage"])
    other.send_message(QueueUrl=url, MessageBody="from the other account")
    other.send_message_batch(QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "batch"}])
    expect_error(other.receive_message, "AccessDenied", 403, QueueUrl=url)
    # Owner-only actions are never granted by a policy.
    expect_error(other.delete_queue, "AccessDenied", 403, QueueUrl=url)
    owner.remove_permission(QueueUrl=url, Label="other-sends")
    expect_error(other.send_message, "AccessDenied", 403, QueueUrl=url, MessageBody="x")


def test_an_explicit_deny_in_the_queue_policy_wins(srv):
    owner, other = client(srv), client(srv, "AKIDOTHER", "other-secret")
    url = owner.create_queue(QueueName="denying")["QueueUrl"]
    queue_arn = f"arn:aws:sqs:{DEFAULT_REGION}:{ACCOUNT}:denying"
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": queue_arn},
        {"Effect": "Deny", "Principal": {"AWS": f"arn:aws:iam::{OTHER_ACCOUNT}:root"}, "Action": "sqs:Send*",
         "Resource": queue_arn},
    ]}
    owner.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(policy)})
    resp = expect_error(other.send_message, "AccessDenied", 403, QueueUrl=url, MessageBody="x")
    assert resp["Error"]["Message"].endswith("with an explicit deny in a resource-based policy")
    assert other.receive_message(QueueUrl=url).get("Messages", []) == []


def test_a_credential_with_grants_sees_and_does_only_what_they_allow(srv):
    owner, sender = client(srv), client(srv, "AKIDSENDER", "sender-secret")
    allowed = owner.create_queue(QueueName="orders-eu")["QueueUrl"]
    hidden = owner.create_queue(QueueName="invoices")["QueueUrl"]
    sender.send_message(QueueUrl=allowed, MessageBody="order")
    expect_error(sender.receive_message, "AccessDenied", 403, QueueUrl=allowed)
    expect_error(sender.send_message, "AccessDenied", 403, QueueUrl=hidden, MessageBody="x")
    expect_error(sender.create_queue, "AccessDenied", 403, QueueName="orders-new")
    assert sender.list_queues().get("QueueUrls", []) == [allowed]


def test_with_the_dev_credential_off_test_test_is_an_unknown_key(make_server, tmp_path):
    config = tmp_path / "no-dev.toml"
    config.write_text('[sqs]\ndev_credential = false\n')
    server = make_server(extra_args=["--config", str(config)])
    expect_error(client(server).list_queues, "InvalidClientTokenId", 403, INVALID_TOKEN)


def test_with_auth_off_unsigned_requests_are_accepted(make_server):
    server = make_server(extra_args=["--sqs-auth", "off"])
    resp = requests.post(server.endpoint, data=QUERY_BODY, headers=QUERY_HEADERS, timeout=5)
    assert resp.status_code == 200, resp.text
    client(server, "anyone", "anything").create_queue(QueueName="open")


def run_js(srv, key, secret, queue) -> dict:
    """tests/sdk-js/sqs.mjs: the JavaScript SDK v3 (installed by scripts/test) creating, sending, receiving
    and deleting, signed by the SDK."""
    script = REPO / "tests" / "sdk-js" / "sqs.mjs"
    if not (script.parent / "node_modules" / "@aws-sdk" / "client-sqs").is_dir():
        pytest.skip("the JavaScript SDK is not installed (scripts/test runs npm ci in tests/sdk-js)")
    done = subprocess.run(["node", str(script), srv.endpoint, key, secret, queue], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_javascript_sdk_v3_signs_requests_veil_accepts(srv):
    assert run_js(srv, "test", "test", "js-sdk") == {"ok": True, "body": "from the js sdk"}
    assert run_js(srv, "test", "wrong", "js-sdk") == {"ok": False, "code": "SignatureDoesNotMatch", "status": 403}


# ---- what a caller may send to on another queue's behalf (docs/security.md, "SQS") ----------------------


def redrive_to(target_arn: str, max_receive_count: int = 1) -> dict:
    return {"RedrivePolicy": json.dumps({"deadLetterTargetArn": target_arn, "maxReceiveCount": max_receive_count})}


def target_does_not_exist(target_arn: str) -> str:
    return (f'Value {{"deadLetterTargetArn":"{target_arn}","maxReceiveCount":1}} for parameter RedrivePolicy is '
            f"invalid. Reason: Dead letter target does not exist.")


def qarn(name: str, account: str = ACCOUNT) -> str:
    return f"arn:aws:sqs:{DEFAULT_REGION}:{account}:{name}"


def test_a_redrive_policy_needs_send_on_its_target(srv):
    owner, orders = client(srv), client(srv, "AKIDORDERS", "orders-secret")
    owner.create_queue(QueueName="dlr-secret")
    owner.create_queue(QueueName="orders-dlr-dlq")
    # A target outside the credential's grants is answered as one that does not exist, whether it exists or
    # not, on CreateQueue and SetQueueAttributes alike.
    for target in ("dlr-secret", "dlr-ghost"):
        resp = expect_error(orders.create_queue, "InvalidParameterValue", 400, QueueName="orders-dlr-src",
                            Attributes=redrive_to(qarn(target)))
        assert resp["Error"]["Message"] == target_does_not_exist(qarn(target))
    src = orders.create_queue(QueueName="orders-dlr-src", Attributes=redrive_to(qarn("orders-dlr-dlq")))["QueueUrl"]
    resp = expect_error(orders.set_queue_attributes, "InvalidParameterValue", 400, QueueUrl=src,
                        Attributes=redrive_to(qarn("dlr-secret")))
    assert resp["Error"]["Message"] == target_does_not_exist(qarn("dlr-secret"))
    # Its own SendMessage there is refused too: the same check.
    expect_error(orders.send_message, "AccessDenied", 403, QueueUrl=f"{srv.endpoint}/{ACCOUNT}/dlr-secret",
                 MessageBody="x")
    # Nothing reaches the queue outside the grants.
    orders.send_message(QueueUrl=src, MessageBody="poison")
    for _ in range(3):
        orders.receive_message(QueueUrl=src, VisibilityTimeout=0)
    secret = owner.get_queue_url(QueueName="dlr-secret")["QueueUrl"]
    assert owner.receive_message(QueueUrl=secret).get("Messages", []) == []
    dlq = owner.get_queue_url(QueueName="orders-dlr-dlq")["QueueUrl"]
    assert [m["Body"] for m in owner.receive_message(QueueUrl=dlq, WaitTimeSeconds=1)["Messages"]] == ["poison"]


def test_another_accounts_dead_letter_target_needs_its_policy_and_its_existence_is_not_told(srv):
    owner, other = client(srv), client(srv, "AKIDOTHER", "other-secret")
    owner.create_queue(QueueName="xacct-dlq")
    answers = []
    for target in ("xacct-dlq", "xacct-ghost"):
        resp = expect_error(other.create_queue, "InvalidParameterValue", 400, QueueName="xacct-src",
                            Attributes=redrive_to(qarn(target)))
        answers.append(resp["Error"]["Message"].replace(target, "<target>"))
    assert answers[0] == answers[1] == target_does_not_exist(qarn("<target>"))
    # The target's owner lets the other account send: the policy may be set.
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": OTHER_ACCOUNT}, "Action": "sqs:SendMessage",
         "Resource": qarn("xacct-dlq")}]}
    owner.set_queue_attributes(QueueUrl=owner.get_queue_url(QueueName="xacct-dlq")["QueueUrl"],
                               Attributes={"Policy": json.dumps(policy)})
    other.create_queue(QueueName="xacct-src", Attributes=redrive_to(qarn("xacct-dlq")))


def test_a_dead_letter_target_keeps_receiving_after_its_permission_is_withdrawn(srv):
    """Authorization is at policy-set time, as in AWS: a Policy changed to Deny afterwards does not stop the
    messages already routed there (docs/security.md, "SQS")."""
    owner, other = client(srv), client(srv, "AKIDOTHER", "other-secret")
    dlq = owner.create_queue(QueueName="withdrawn-dlq")["QueueUrl"]

    def policy(effect):
        return json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": effect, "Principal": {"AWS": OTHER_ACCOUNT}, "Action": "sqs:SendMessage",
             "Resource": qarn("withdrawn-dlq")}]})

    owner.set_queue_attributes(QueueUrl=dlq, Attributes={"Policy": policy("Allow")})
    src = other.create_queue(QueueName="withdrawn-src", Attributes=redrive_to(qarn("withdrawn-dlq")))["QueueUrl"]
    owner.set_queue_attributes(QueueUrl=dlq, Attributes={"Policy": policy("Deny")})
    expect_error(other.send_message, "AccessDenied", 403, QueueUrl=dlq, MessageBody="direct")
    other.send_message(QueueUrl=src, MessageBody="routed")
    for _ in range(3):
        other.receive_message(QueueUrl=src, VisibilityTimeout=0)
    moved = owner.receive_message(QueueUrl=dlq, WaitTimeSeconds=1, AttributeNames=["All"])["Messages"]
    assert [m["Body"] for m in moved] == ["routed"]
    assert moved[0]["Attributes"]["DeadLetterQueueSourceArn"] == qarn("withdrawn-src", OTHER_ACCOUNT)


def test_a_move_task_needs_send_on_where_it_moves_messages(srv):
    owner, mover, other = client(srv), client(srv, "AKIDMOVER", "mover-secret"), client(srv, "AKIDOTHER",
                                                                                         "other-secret")
    for name in ("mv-dlq", "mv-mine", "mv-theirs"):
        owner.create_queue(QueueName=name)
    src = owner.create_queue(QueueName="mv-src", Attributes=redrive_to(qarn("mv-dlq")))["QueueUrl"]
    owner.send_message(QueueUrl=src, MessageBody="dead")
    for _ in range(3):
        owner.receive_message(QueueUrl=src, VisibilityTimeout=0)
    other.create_queue(QueueName="mv-foreign")

    def denied(who, target, why="no identity-based policy"):
        return (f"User: {who} is not authorized to perform: sqs:SendMessage on resource: {target} because {why} "
                f"allows the sqs:SendMessage action")

    mover_arn = f"arn:aws:iam::{ACCOUNT}:user/AKIDMOVER"
    # Another queue of the account outside the grants, existing or not: the same AccessDenied.
    for target in ("mv-theirs", "mv-ghost"):
        expect_error(mover.start_message_move_task, "AccessDenied", 403, denied(mover_arn, qarn(target)),
                     SourceArn=qarn("mv-dlq"), DestinationArn=qarn(target))
    # Without a destination the messages go back to mv-src, which the grants do not cover.
    expect_error(mover.start_message_move_task, "AccessDenied", 403, denied(mover_arn, qarn("mv-src")),
                 SourceArn=qarn("mv-dlq"))
    # Another account's queue needs its policy, even for the owner of the source.
    foreign = qarn("mv-foreign", OTHER_ACCOUNT)
    expect_error(owner.start_message_move_task, "AccessDenied", 403,
                 denied(f"arn:aws:iam::{ACCOUNT}:root", foreign, "no resource-based policy"),
                 SourceArn=qarn("mv-dlq"), DestinationArn=foreign)
    theirs = owner.get_queue_url(QueueName="mv-theirs")["QueueUrl"]
    assert owner.receive_message(QueueUrl=theirs).get("Messages", []) == []
    assert other.receive_message(QueueUrl=other.get_queue_url(QueueName="mv-foreign")["QueueUrl"]).get(
        "Messages", []) == []
    # Where the grants reach, the task runs.
    mover.start_message_move_task(SourceArn=qarn("mv-dlq"), DestinationArn=qarn("mv-mine"))
    mine = owner.get_queue_url(QueueName="mv-mine")["QueueUrl"]
    deadline = time.monotonic() + 5
    moved = []
    while not moved and time.monotonic() < deadline:
        moved = owner.receive_message(QueueUrl=mine, WaitTimeSeconds=1).get("Messages", [])
    assert [m["Body"] for m in moved] == ["dead"]


# ---- a presigned URL is one request (docs/security.md, "SQS") ----------------------------------------------


def test_a_presigned_url_cannot_be_turned_into_another_action(srv):
    sqs = client(srv)
    url = sqs.create_queue(QueueName="bound-q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="keep me")
    unsigned_target = "There were headers present in the request which were not signed: x-amz-target"
    # botocore's presigned GetQueueUrl on the queue's path: an unsigned X-Amz-Target would make it a PurgeQueue
    # of the queue the path names.
    presigned = presigned_url(srv, {"Action": "GetQueueUrl", "QueueName": "bound-q"}, 60, "POST",
                              path=f"/{ACCOUNT}/bound-q")
    resp = requests.post(presigned, timeout=5, headers={"X-Amz-Target": "AmazonSQS.PurgeQueue"})
    assert json_error(resp) == (403, "AccessDenied;Sender", unsigned_target)
    # Signed with UNSIGNED-PAYLOAD, the header and a JSON body naming the queue: refused alike.
    presigned = presigned_url(srv, {"Action": "GetQueueUrl", "QueueName": "bound-q"}, 60, "POST",
                              unsigned_payload=True)
    resp = requests.post(presigned, data=json.dumps({"QueueUrl": url}), timeout=5,
                         headers={"X-Amz-Target": "AmazonSQS.PurgeQueue",
                                  "Content-Type": "application/x-amz-json-1.0"})
    assert json_error(resp) == (403, "AccessDenied;Sender", unsigned_target)
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"]["ApproximateNumberOfMessages"] == "1"
    # The URL as it was signed still works.
    resp = requests.post(presigned, timeout=5)
    assert resp.status_code == 200 and url in resp.text, resp.text


def test_a_header_signed_request_cannot_be_replayed_as_another_action(srv):
    sqs = client(srv)
    url = sqs.create_queue(QueueName="bound-header-q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="keep me")
    # A request signed without X-Amz-Target among its signed headers (an empty Query-protocol body on the
    # queue's path), captured and sent again with a target naming PurgeQueue.
    target = f"{srv.endpoint}/{ACCOUNT}/bound-header-q"
    signed = AWSRequest(method="POST", url=target, data=b"",
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
    SigV4Auth(Credentials("test", "test"), "sqs", DEFAULT_REGION).add_auth(signed)
    headers = dict(signed.headers.items())
    headers["X-Amz-Target"] = "AmazonSQS.PurgeQueue"
    resp = requests.post(target, data=b"", headers=headers, timeout=5)
    assert json_error(resp) == (
        403, "AccessDenied;Sender", "There were headers present in the request which were not signed: x-amz-target")
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"]["ApproximateNumberOfMessages"] == "1"


def test_a_presigned_url_takes_no_parameters_from_an_unsigned_body(srv):
    sqs = client(srv)
    url = sqs.create_queue(QueueName="bound-body-q")["QueueUrl"]
    presigned = presigned_url(srv, {"Action": "SendMessage", "QueueUrl": url, "MessageBody": "signed"}, 60,
                              "POST", unsigned_payload=True)
    injected = urllib.parse.urlencode({"MessageAttribute.1.Name": "injected",
                                       "MessageAttribute.1.Value.DataType": "String",
                                       "MessageAttribute.1.Value.StringValue": "x"})
    resp = requests.post(presigned, data=injected, timeout=5,
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
    status, code, message = query_error(resp)
    assert (status, code) == (403, "AccessDenied")
    assert message.startswith("There was a body present in the request which was not signed")
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    # Sent as signed, with no body, it works.
    assert requests.post(presigned, timeout=5).status_code == 200
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], WaitTimeSeconds=1)["Messages"]
    assert [(m["Body"], m.get("MessageAttributes")) for m in got] == [("signed", None)]


def test_an_action_named_both_ways_differently_is_invalid_action(srv):
    sqs = client(srv)
    url = sqs.create_queue(QueueName="named-twice")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="keep me")
    target = srv.endpoint + "/?Action=GetQueueUrl&QueueName=named-twice"
    body = json.dumps({"QueueUrl": url}).encode()
    headers = signed(target, body, {"Content-Type": "application/x-amz-json-1.0",
                                    "X-Amz-Target": "AmazonSQS.PurgeQueue"})
    resp = requests.post(target, data=body, headers=headers, timeout=5)
    assert json_error(resp) == (400, "InvalidAction;Sender",
                                "The action or operation requested is invalid. Verify that the action is typed "
                                "correctly.")
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"]["ApproximateNumberOfMessages"] == "1"
