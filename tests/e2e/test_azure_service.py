"""Azure service properties and CORS against the real binary: Set Service Properties refuses what
Azure refuses (retention outside 1-365 days, more than five CORS rules) with 400 InvalidXmlDocument and keeps
the previous document; the properties survive a graceful restart and a kill -9 (they are written to the data
dir before the 202); actual (non-preflight) responses carry the Access-Control headers of the matching CORS
rule, and none when no rule matches. Each test that sets properties runs its own server, so no test sees
another's rules."""

import pytest
import requests
from azure.storage.queue import CorsRule, Metrics, QueueAnalyticsLogging, QueueServiceClient, RetentionPolicy

from helpers import azure_full_sas, azure_name, error_details, expect_azure_error


def service_of(srv) -> QueueServiceClient:
    return QueueServiceClient.from_connection_string(srv.azure_connection_string())


def hour_metrics(days: int) -> Metrics:
    return Metrics(enabled=True, include_apis=True, retention_policy=RetentionPolicy(enabled=True, days=days))


@pytest.mark.parametrize("days", [0, 366])
def test_retention_outside_1_to_365_days_is_400_invalid_xml_document(make_server, days):
    service = service_of(make_server())
    e = expect_azure_error(service.set_service_properties, "InvalidXmlDocument", 400, hour_metrics=hour_metrics(days))
    assert "Days" in error_details(e)["Reason"]
    kept = service.get_service_properties()["hour_metrics"]
    assert (kept.enabled, kept.retention_policy.enabled) == (False, False), "the refused document was not kept"
    for days in (1, 365):
        service.set_service_properties(hour_metrics=hour_metrics(days))
        assert service.get_service_properties()["hour_metrics"].retention_policy.days == days


def test_more_than_five_cors_rules_are_400_invalid_xml_document(make_server):
    service = service_of(make_server())
    rules = [CorsRule([f"https://app{i}.example"], ["GET"]) for i in range(6)]
    e = expect_azure_error(service.set_service_properties, "InvalidXmlDocument", 400, cors=rules)
    assert "CorsRule" in error_details(e)["Reason"]
    assert not service.get_service_properties()["cors"], "the refused rules were not kept"
    service.set_service_properties(cors=rules[:5])
    assert [r.allowed_origins for r in service.get_service_properties()["cors"]] == [
        f"https://app{i}.example" for i in range(5)]


def set_everything(service: QueueServiceClient) -> None:
    service.set_service_properties(
        analytics_logging=QueueAnalyticsLogging(read=True, write=True, delete=False,
                                                retention_policy=RetentionPolicy(enabled=True, days=9)),
        hour_metrics=hour_metrics(30),
        cors=[CorsRule(["https://app.example"], ["GET", "PUT"], allowed_headers=["x-ms-meta-*"],
                       exposed_headers=["x-ms-request-id"], max_age_in_seconds=120)],
    )


def assert_everything(service: QueueServiceClient) -> None:
    props = service.get_service_properties()
    logging = props["analytics_logging"]
    assert (logging.read, logging.write, logging.delete, logging.retention_policy.days) == (True, True, False, 9)
    assert (props["hour_metrics"].enabled, props["hour_metrics"].retention_policy.days) == (True, 30)
    [rule] = props["cors"]
    assert (rule.allowed_origins, rule.allowed_methods, rule.allowed_headers, rule.exposed_headers,
            rule.max_age_in_seconds) == ("https://app.example", "GET,PUT", "x-ms-meta-*", "x-ms-request-id", 120)


def test_service_properties_survive_a_restart(make_server):
    srv = make_server()
    set_everything(service_of(srv))
    srv.stop_cleanly()
    srv.start()
    assert_everything(service_of(srv))
    preflight = requests.options(f"{srv.azure_endpoint}/any-queue/messages", timeout=10, headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "PUT"})
    assert preflight.status_code == 200, "the restored CORS rule answers preflights"


def test_service_properties_survive_a_kill_9(make_server):
    srv = make_server()
    set_everything(service_of(srv))
    srv.kill()
    srv.start()
    assert_everything(service_of(srv))


def get_with_origin(srv, path: str, origin: str | None, method: str = "GET") -> requests.Response:
    headers = {"Origin": origin} if origin else {}
    url = f"{srv.azure_endpoint}{path}?{'peekonly=true&' if method == 'GET' else ''}{azure_full_sas()}"
    return requests.request(method, url, headers=headers, timeout=10)


def test_actual_responses_carry_the_cors_headers_of_the_matching_rule(make_server):
    srv = make_server()
    service = service_of(srv)
    queue = service.create_queue(azure_name("cors"))
    path = f"/{queue.queue_name}/messages"
    before = get_with_origin(srv, path, "https://app.example")
    assert before.status_code == 200
    assert "Access-Control-Allow-Origin" not in before.headers, "no rules, no CORS headers"

    service.set_service_properties(cors=[CorsRule(["https://app.example"], ["GET"],
                                                  exposed_headers=["x-ms-request-id", "x-ms-meta-*"])])
    allowed = get_with_origin(srv, path, "https://app.example")
    assert allowed.status_code == 200
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert allowed.headers["Access-Control-Allow-Credentials"] == "true"
    assert allowed.headers["Access-Control-Expose-Headers"] == "x-ms-request-id,x-ms-meta-*"
    assert allowed.headers["Vary"] == "Origin"

    stranger = get_with_origin(srv, path, "https://evil.example")
    assert stranger.status_code == 200, "CORS neither authorizes nor refuses a request"
    assert "Access-Control-Allow-Origin" not in stranger.headers
    assert "Access-Control-Expose-Headers" not in stranger.headers
    assert stranger.headers["Vary"] == "Origin"

    not_allowed_method = get_with_origin(srv, path, "https://app.example", method="DELETE")
    assert not_allowed_method.status_code == 204
    assert "Access-Control-Allow-Origin" not in not_allowed_method.headers


def test_a_wildcard_rule_answers_any_origin_with_a_star(make_server):
    srv = make_server()
    service = service_of(srv)
    queue = service.create_queue(azure_name("star"))
    service.set_service_properties(cors=[CorsRule(["*"], ["GET"], exposed_headers=["*"])])
    resp = get_with_origin(srv, f"/{queue.queue_name}/messages", "https://anyone.example")
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert resp.headers["Access-Control-Expose-Headers"] == "*"
    assert "Access-Control-Allow-Credentials" not in resp.headers
    assert "Vary" not in resp.headers


def test_an_error_reaches_a_browser_with_its_cors_headers(make_server):
    srv = make_server()
    service = service_of(srv)
    service.set_service_properties(cors=[CorsRule(["https://app.example"], ["GET"])])
    missing = get_with_origin(srv, "/no-such-queue-here/messages", "https://app.example")
    assert (missing.status_code, missing.headers["x-ms-error-code"]) == (404, "QueueNotFound")
    assert missing.headers["Access-Control-Allow-Origin"] == "https://app.example"
