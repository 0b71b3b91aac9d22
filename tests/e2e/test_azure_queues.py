"""Azure Queue Storage queue and service operations with the official SDK against the real binary: create
(201, 204 with the same metadata, 409 QueueAlreadyExists with different), delete, metadata with the
approximate message count, list queues (prefix, paging with markers, include=metadata), queue ACLs (at most
five policies), service properties, service stats, CORS preflight, name rules, and the headers every
response carries."""

import requests
from azure.core.exceptions import ResourceExistsError
from azure.storage.queue import AccessPolicy, CorsRule, QueueSasPermissions

from helpers import AZURE_ACCOUNT, azure_error, azure_full_sas, azure_name, azure_raw, expect_azure_error


def headers_of(call, **kwargs) -> dict:
    seen = {}

    def hook(response):
        seen.update({k.lower(): v for k, v in response.http_response.headers.items()})

    call(raw_response_hook=hook, **kwargs)
    return seen


def test_create_is_idempotent_with_the_same_metadata_and_409_with_different(azure_service, azure_queue_name):
    q = azure_service.get_queue_client(azure_queue_name)
    q.create_queue(metadata={"team": "billing"})
    # The SDK turns the 204 of an identical create into ResourceExistsError itself, keeping the status.
    same = expect_azure_error(q.create_queue, "QueueAlreadyExists", 204, metadata={"team": "billing"})
    assert isinstance(same, ResourceExistsError)
    e = expect_azure_error(q.create_queue, "QueueAlreadyExists", 409, metadata={"team": "payroll"})
    assert isinstance(e, ResourceExistsError)


def test_create_answers_201_then_204(server, azure_queue_name):
    assert azure_raw(server, "PUT", f"/{azure_queue_name}").status_code == 201
    assert azure_raw(server, "PUT", f"/{azure_queue_name}").status_code == 204


def test_delete_queue_removes_it(azure_queue):
    azure_queue.delete_queue()
    expect_azure_error(azure_queue.get_queue_properties, "QueueNotFound", 404)
    expect_azure_error(azure_queue.delete_queue, "QueueNotFound", 404)


def test_metadata_replaces_all_and_reports_the_approximate_count(azure_queue):
    azure_queue.set_queue_metadata({"a": "1", "b": "2"})
    azure_queue.set_queue_metadata({"c": "3"})
    azure_queue.send_message("visible")
    azure_queue.send_message("delayed", visibility_timeout=60)
    azure_queue.send_message("hidden")
    azure_queue.receive_message(visibility_timeout=60)
    props = azure_queue.get_queue_properties()
    assert props.metadata == {"c": "3"}
    assert props.approximate_message_count == 3


def test_metadata_names_must_be_identifiers(server, azure_queue):
    resp = azure_raw(server, "PUT", f"/{azure_queue.queue_name}", "comp=metadata", headers={"x-ms-meta-1bad": "x"})
    assert (resp.status_code, resp.headers["x-ms-error-code"]) == (400, "InvalidMetadata")


def test_list_queues_filters_by_prefix_pages_and_includes_metadata(azure_service):
    prefix = azure_name("list")
    names = [f"{prefix}-{i}" for i in range(5)]
    for i, name in enumerate(names):
        azure_service.create_queue(name, metadata={"n": str(i)})
    listed = list(azure_service.list_queues(name_starts_with=prefix, include_metadata=True, results_per_page=2))
    assert [q.name for q in listed] == names
    assert [q.metadata for q in listed] == [{"n": str(i)} for i in range(5)]
    pages = azure_service.list_queues(name_starts_with=prefix, results_per_page=2).by_page()
    assert [len(list(page)) for page in pages] == [2, 2, 1]


def test_list_queues_xml_has_the_fields_sdks_read(server):
    resp = azure_raw(server, "GET", "/", "comp=list&maxresults=1&prefix=zzz-none")
    assert resp.status_code == 200
    assert resp.text.startswith("<?xml")
    assert f'ServiceEndpoint="http://127.0.0.1:{server.azure_port}/devstoreaccount1/"' in resp.text
    assert "<NextMarker />" in resp.text and "<MaxResults>1</MaxResults>" in resp.text


def test_acl_round_trips_and_holds_at_most_five_policies(azure_queue):
    policy = AccessPolicy(permission=QueueSasPermissions(read=True, process=True), start="2024-01-01T00:00:00Z",
                          expiry="2030-01-01T00:00:00Z")
    azure_queue.set_queue_access_policy(signed_identifiers={"readers": policy})
    got = azure_queue.get_queue_access_policy()
    assert set(got) == {"readers"}
    assert got["readers"].permission == "rp"
    assert str(got["readers"].expiry).startswith("2030-01-01")
    five = {f"p{i}": policy for i in range(5)}
    azure_queue.set_queue_access_policy(signed_identifiers=five)
    assert len(azure_queue.get_queue_access_policy()) == 5
    six = {f"p{i}": policy for i in range(6)}
    expect_azure_error(azure_queue.set_queue_access_policy, "InvalidXmlDocument", 400, signed_identifiers=six)


def test_more_than_five_signed_identifiers_are_refused_by_the_server(server, azure_queue):
    one = ("<SignedIdentifier><Id>p{}</Id><AccessPolicy><Expiry>2030-01-01T00:00:00Z</Expiry>"
           "<Permission>r</Permission></AccessPolicy></SignedIdentifier>")
    body = "<?xml version='1.0' encoding='utf-8'?><SignedIdentifiers>" + "".join(one.format(i) for i in range(6)) + "</SignedIdentifiers>"
    resp = azure_raw(server, "PUT", f"/{azure_queue.queue_name}", "comp=acl", data=body)
    assert (resp.status_code, resp.headers["x-ms-error-code"]) == (400, "InvalidXmlDocument")


def test_service_properties_keep_what_was_set(azure_service):
    azure_service.set_service_properties(cors=[CorsRule(["https://app.example"], ["GET", "PUT"], max_age_in_seconds=300)])
    props = azure_service.get_service_properties()
    assert props["analytics_logging"] is not None
    assert [r.allowed_origins for r in props["cors"]] == ["https://app.example"]
    assert props["cors"][0].max_age_in_seconds == 300


def test_cors_preflight_follows_the_rules(server, azure_service):
    azure_service.set_service_properties(cors=[CorsRule(["https://app.example"], ["GET"], allowed_headers=["x-ms-*"],
                                                        max_age_in_seconds=60)])
    url = f"{server.azure_endpoint}/any-queue/messages"
    ok = requests.options(url, headers={"Origin": "https://app.example", "Access-Control-Request-Method": "GET",
                                        "Access-Control-Request-Headers": "x-ms-version"}, timeout=10)
    assert ok.status_code == 200, ok.text
    assert ok.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert ok.headers["Access-Control-Max-Age"] == "60"
    refused = requests.options(url, headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
                               timeout=10)
    assert (refused.status_code, refused.headers["x-ms-error-code"]) == (403, "CorsPreflightFailure")


def test_service_stats_answer_on_the_secondary_endpoint(server):
    # The SDK sends get_service_stats to the "-secondary" account of the same host.
    url = f"http://127.0.0.1:{server.azure_port}/{AZURE_ACCOUNT}-secondary/"
    resp = requests.get(f"{url}?restype=service&comp=stats&{azure_full_sas()}", timeout=10)
    assert resp.status_code == 200, resp.text
    assert "<GeoReplication><Status>live</Status><LastSyncTime>" in resp.text


def test_queue_names_follow_azure_rules(server):
    too_short = azure_raw(server, "PUT", "/ab")
    assert (too_short.status_code, too_short.headers["x-ms-error-code"]) == (400, "OutOfRangeInput")
    for bad in ("Upper", "dou--ble", "-lead", "trail-", "under_score"):
        resp = azure_raw(server, "PUT", f"/{bad}")
        assert (resp.status_code, resp.headers["x-ms-error-code"]) == (400, "InvalidResourceName"), bad


def test_every_response_carries_request_id_version_date_and_the_client_request_id(azure_queue):
    seen = headers_of(azure_queue.get_queue_properties)
    assert seen["x-ms-request-id"]
    assert seen["x-ms-version"]
    assert seen["date"].endswith(" GMT")
    assert seen["x-ms-client-request-id"], "the SDK sends one and Veil echoes it"
    assert "x-ms-approximate-messages-count" in seen


def test_errors_carry_the_error_code_header_and_xml(server):
    resp = azure_raw(server, "GET", "/no-such-queue-xyz", "comp=metadata",
                     headers={"x-ms-client-request-id": "my-id-1"})
    assert resp.status_code == 404
    assert resp.headers["x-ms-error-code"] == "QueueNotFound"
    assert resp.headers["x-ms-client-request-id"] == "my-id-1"
    assert resp.headers["x-ms-request-id"]
    error = azure_error(resp)
    assert error["Code"] == "QueueNotFound"
    assert "RequestId:" in error["Message"]
