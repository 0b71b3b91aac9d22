"""Identifiers that reach the engine are checked in one place (docs/security.md "Identifiers"), against the real
binary with the real clients: a SigV4 region outside AWS's shape (a NUL byte, say) is refused before it can become a
namespace; the admin paths (the API, `[[queues]]`/`queues apply`, `veil import`) refuse queue names no protocol
can address and retentions past the widest protocol's; SQS lists only the queues it can address; a KubeMQ
ClientID is bounded and counted in the message's size; a FIFO group or deduplication id with a control
character is one request's refusal.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import grpc
import pytest
import requests
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from kubemq.grpc import kubemq_pb2, kubemq_pb2_grpc
from kubemq.queues import QueueMessage

from helpers import kubemq_client, kubemq_receive, parse_xml, veil_bin

CLIENT_ID_REFUSED = "Error 400: invalid client id, must be at most 256 bytes without control characters"


def api(server, method: str, path: str, body=None) -> requests.Response:
    return requests.request(method, f"{server.admin_endpoint}/api/v1{path}", json=body, timeout=30)


def namespaces(server) -> set[str]:
    body = api(server, "GET", "/queues").json()
    return {q["namespace"] for q in body["queues"]}


def presigned(endpoint: str, params: dict, region: str) -> requests.Response:
    """A Query-protocol GET presigned for `region` (the scope region travels percent-encoded in the URL)."""
    request = AWSRequest(method="GET", url=endpoint + "/", params={"Version": "2012-11-05", **params})
    SigV4QueryAuth(Credentials("test", "test"), "sqs", region, expires=300).add_auth(request)
    return requests.get(request.prepare().url, timeout=30)


def test_a_sigv4_region_outside_awss_shape_is_refused_and_makes_no_namespace(server, endpoint):
    name = f"region-{uuid.uuid4().hex[:8]}"
    for region in ["us\x00east-1", "eu-west-1\n", "Bad Region", "a" * 100]:
        response = presigned(endpoint, {"Action": "CreateQueue", "QueueName": name}, region)
        assert response.status_code == 403, (region, response.text)
        error = parse_xml(response)
        assert error.findtext("Error/Code") == "SignatureDoesNotMatch", response.text
        assert error.findtext("Error/Message").startswith("Credential should be scoped to a valid region, not '")
    assert not [ns for ns in namespaces(server) if ns.startswith("sqs:") and not ns.isprintable()]
    # A region of AWS's shape still works, presigned as the SDKs do.
    ok = presigned(endpoint, {"Action": "CreateQueue", "QueueName": name}, "eu-west-1")
    assert ok.status_code == 200, ok.text


def test_the_admin_api_refuses_queue_names_no_protocol_can_address(server):
    for name in ["a/b", "..", ".hidden", "line\nbreak", "nul\x00byte", "has space", "x" * 100_000, "caf\u00e9"]:
        response = api(server, "POST", "/queues", {"name": name})
        assert response.status_code == 400, (name[:20], response.text[:200])
        assert response.json()["error"]["code"] == "InvalidArgument"
        assert name not in response.text or len(name) < 3, "a refusal does not echo an arbitrary name back"
    response = api(server, "POST", "/queues", {"name": "ok", "namespace": "bad\x00ns"})
    assert response.status_code == 400, response.text
    assert "bad\x00ns" not in namespaces(server)
    # A name some protocol addresses is made.
    good = f"kube.chan-{uuid.uuid4().hex[:6]}"
    assert api(server, "POST", "/queues", {"name": good}).status_code == 201


def test_an_admin_retention_past_the_widest_protocols_is_refused(server):
    name = f"ret-{uuid.uuid4().hex[:8]}"
    response = api(server, "POST", "/queues", {"name": name, "settings": {"retention_s": 2**64 // 1000}})
    assert response.status_code == 400, response.text
    assert "retention_s must be from 1 to 2147483647" in response.json()["error"]["message"]
    assert api(server, "POST", "/queues", {"name": name, "settings": {"retention_s": 2**31 - 1}}).status_code == 201


def test_a_declaration_list_with_a_name_no_protocol_allows_changes_nothing(server, tmp_path):
    good = f"decl-{uuid.uuid4().hex[:8]}"
    listing = tmp_path / "queues.toml"
    listing.write_text(f'[[queues]]\nname = "{good}"\n\n[[queues]]\nname = "bad name/../x"\n')
    result = subprocess.run(
        [veil_bin(), "--endpoint", server.admin_endpoint, "queues", "apply", str(listing)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0, result.stdout
    assert "queues[2]" in (result.stderr + result.stdout), result.stderr
    assert api(server, "GET", f"/queues/default/{good}").status_code == 404, "a refused list changed nothing"


def test_an_import_into_a_name_no_protocol_allows_is_refused(server, tmp_path):
    result = subprocess.run(
        [veil_bin(), "--endpoint", server.admin_endpoint, "import", "bad name", "--create"],
        input=json.dumps({"body_base64": "aGk="}) + "\n", capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0, result.stdout
    assert "bad name" not in {q["name"] for q in api(server, "GET", "/queues").json()["queues"]}


def test_sqs_lists_only_the_queues_it_can_address(server, sqs):
    prefix = f"listed{uuid.uuid4().hex[:6]}"
    assert api(server, "POST", "/queues", {"name": f"{prefix}.kubemq.only"}).status_code == 201
    assert api(server, "POST", "/queues", {"name": f"{prefix}-sqs"}).status_code == 201
    urls = sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", [])
    assert [url.rsplit("/", 1)[1] for url in urls] == [f"{prefix}-sqs"]


def test_a_kubemq_client_id_is_bounded_on_every_request(server):
    channel = f"cid-{uuid.uuid4().hex[:8]}"
    for client_id in ["c" * 257, "c" * (3 * 1024 * 1024), "tab\tid"]:
        client = kubemq_client(server, client_id=client_id)
        sent = client.send_queue_message(QueueMessage(channel=channel, body=b"x"))
        assert sent.is_error and sent.error == CLIENT_ID_REFUSED, (len(client_id), sent.error)
        polled = client.receive_queue_messages(channel=channel, max_messages=1, wait_timeout_in_seconds=1)
        assert polled.is_error and polled.error == CLIENT_ID_REFUSED, (len(client_id), polled.error)
        pulled = client.pull(channel, 1, 1)
        assert pulled.is_error and pulled.error == CLIENT_ID_REFUSED, (len(client_id), pulled.error)
        if len(client_id) < 1024 * 1024:  # the SDK's channel query carries the id twice, past its own 4 MiB
            with pytest.raises(Exception) as created:
                client.create_queues_channel(channel)
            assert CLIENT_ID_REFUSED in str(created.value), len(client_id)
        with grpc.insecure_channel(server.kubemq_address) as rpc:
            purged = kubemq_pb2_grpc.kubemqStub(rpc).AckAllQueueMessages(
                kubemq_pb2.AckAllQueueMessagesRequest(RequestID="p", ClientID=client_id, Channel=channel),
                timeout=30,
            )
        assert purged.IsError and purged.Error == CLIENT_ID_REFUSED, (len(client_id), purged.Error)
    at_bound = kubemq_client(server, client_id="c" * 256)
    sent = at_bound.send_queue_message(QueueMessage(channel=channel, body=b"x"))
    assert not sent.is_error, sent.error
    [message] = kubemq_receive(at_bound, channel, wait=2).messages
    assert message.body == b"x"
    assert server.log_path.stat().st_size < 1024 * 1024, "no log line carries a refused client id"


def test_a_kubemq_senders_client_id_counts_in_the_message_size(server):
    channel = f"cidsize-{uuid.uuid4().hex[:8]}"
    created = api(server, "POST", "/queues", {"name": channel, "settings": {"message_size_bytes_max": 200}})
    assert created.status_code == 201, created.text
    short = kubemq_client(server, client_id="c")
    assert not short.send_queue_message(QueueMessage(channel=channel, body=b"b" * 60)).is_error
    long_id = kubemq_client(server, client_id="c" * 200)
    refused = long_id.send_queue_message(QueueMessage(channel=channel, body=b"b" * 60))
    assert refused.is_error and refused.error.startswith("Error 413: message of "), refused.error
    detail = api(server, "GET", f"/queues/default/{channel}").json()
    assert detail["queue"]["visible"] == 1, detail


def test_a_control_character_in_a_fifo_id_sent_through_the_admin_api_is_one_requests_refusal(server):
    name = f"ids-{uuid.uuid4().hex[:8]}.fifo"
    created = api(server, "POST", "/queues", {"name": name, "fifo": True})
    assert created.status_code == 201, created.text
    for message in [
        {"body": "hi", "group": "g\x00", "dedup_id": "d1"},
        {"body": "hi", "group": "g", "dedup_id": "d\x01"},
    ]:
        response = api(server, "POST", f"/queues/default/{name}/messages", {"messages": [message]})
        assert response.status_code == 400, response.text
    fine = api(server, "POST", f"/queues/default/{name}/messages",
               {"messages": [{"body": "hi", "group": "g", "dedup_id": "d2"}]})
    assert fine.status_code in (200, 201), fine.text
