"""Azure authentication against the real binary: Shared Key with the right key works and a wrong key gets 403
AuthenticationFailed; a request with no credentials is refused; account SAS and queue SAS work and their
permissions (read/peek, add, update, process), resource types, times and queue binding are enforced; a
queue SAS can take its permissions from a stored access policy; `--azure-auth off` accepts unsigned
requests; accounts from the TOML config have their own keys and namespaces. A SAS may not give a
field (start, expiry, permissions) its stored access policy also gives (403 AuthenticationFailed), so moving
the policy's expiry to the past revokes a SAS that carries its own. A forged SAS is refused
before any parameter is read; an expired SAS and a bad signature are told apart by Azure's detail; a SAS's
`sip` is enforced against the peer address (AuthorizationSourceIPMismatch); Shared Key Lite is verified."""

from datetime import datetime, timedelta, timezone

import pytest
import requests
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
from azure.storage.queue import (
    AccessPolicy,
    AccountSasPermissions,
    QueueClient,
    QueueSasPermissions,
    QueueServiceClient,
    ResourceTypes,
    generate_account_sas,
    generate_queue_sas,
)

from helpers import AZURE_ACCOUNT, AZURE_KEY, azure_name, error_details, expect_azure_error

WRONG_KEY = "d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXkgd3Jvbmcga2V5IHdyb25nIGtleQ=="


def in_an_hour() -> datetime:
    return datetime.now(timezone.utc) + timedelta(hours=1)


def test_shared_key_with_the_account_key_works(azure_queue):
    azure_queue.send_message("signed")
    assert azure_queue.peek_messages()[0].content == "signed"


def test_shared_key_with_a_wrong_key_is_403_authentication_failed(server, azure_queue):
    wrong = QueueClient.from_connection_string(server.azure_connection_string(key=WRONG_KEY), azure_queue.queue_name)
    e = expect_azure_error(wrong.send_message, "AuthenticationFailed", 403, content="forged")
    assert isinstance(e, ClientAuthenticationError)
    assert azure_queue.peek_messages() == [], "nothing was sent"


def test_an_unknown_account_is_403(server):
    stranger = QueueServiceClient.from_connection_string(server.azure_connection_string(account="nobodyhere"))
    expect_azure_error(lambda: list(stranger.list_queues()), "AuthenticationFailed", 403)


def test_a_request_without_credentials_is_refused(server, azure_queue):
    resp = requests.get(f"{server.azure_endpoint}/{azure_queue.queue_name}/messages", params={"peekonly": "true"},
                        timeout=10)
    assert resp.status_code == 401
    assert resp.headers["x-ms-error-code"] == "NoAuthenticationInformation"


def account_sas(permission: AccountSasPermissions, resource_types=None, **kwargs) -> str:
    return generate_account_sas(
        AZURE_ACCOUNT, AZURE_KEY,
        resource_types=resource_types or ResourceTypes(service=True, container=True, object=True),
        permission=permission, expiry=kwargs.pop("expiry", in_an_hour()), **kwargs)


def test_an_account_sas_grants_its_permissions_only(server, azure_queue):
    sas = account_sas(AccountSasPermissions(read=True, add=True, list=True))
    service = QueueServiceClient(server.azure_endpoint, credential=sas)
    assert azure_queue.queue_name in [q.name for q in service.list_queues(name_starts_with=azure_queue.queue_name)]
    q = service.get_queue_client(azure_queue.queue_name)
    q.send_message("via account sas")
    assert q.peek_messages()[0].content == "via account sas"
    expect_azure_error(q.receive_message, "AuthorizationPermissionMismatch", 403)
    expect_azure_error(q.clear_messages, "AuthorizationPermissionMismatch", 403)
    expect_azure_error(q.delete_queue, "AuthorizationPermissionMismatch", 403)


def test_an_account_sas_is_limited_to_its_resource_types(server, azure_queue):
    sas = account_sas(AccountSasPermissions(read=True, add=True, list=True), ResourceTypes(object=True))
    q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=sas)
    q.send_message("objects only")
    expect_azure_error(q.get_queue_properties, "AuthorizationResourceTypeMismatch", 403)


def authentication_detail(e) -> str:
    return error_details(e)["AuthenticationErrorDetail"]


def test_an_expired_or_not_yet_valid_sas_fails_authentication_for_its_time_window(server, azure_queue):
    # Both are correctly signed with the account key: only their time windows are wrong.
    past = account_sas(AccountSasPermissions(read=True), expiry=datetime.now(timezone.utc) - timedelta(minutes=1))
    q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=past)
    e = expect_azure_error(q.peek_messages, "AuthenticationFailed", 403)
    detail = authentication_detail(e)
    assert detail.startswith("Signature not valid in the specified time frame:") and "- Current [" in detail, detail
    future = account_sas(AccountSasPermissions(read=True), start=datetime.now(timezone.utc) + timedelta(minutes=30))
    q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=future)
    e = expect_azure_error(q.peek_messages, "AuthenticationFailed", 403)
    detail = authentication_detail(e)
    assert detail.startswith("Signature not valid in the specified time frame: Start ["), detail


def test_a_tampered_sas_fails_authentication_for_its_signature(server, azure_queue):
    sas = account_sas(AccountSasPermissions(read=True)).replace("sp=r", "sp=rdp")
    q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=sas)
    e = expect_azure_error(q.clear_messages, "AuthenticationFailed", 403)
    assert authentication_detail(e).startswith("Signature did not match."), authentication_detail(e)


def test_a_forged_sas_is_refused_before_its_parameters_are_read(server, azure_queue):
    forged = generate_queue_sas(AZURE_ACCOUNT, azure_queue.queue_name, WRONG_KEY,
                                permission=QueueSasPermissions(process=True), expiry=in_an_hour())
    url = f"{server.azure_endpoint}/{azure_queue.queue_name}/messages?numofmessages=99&{forged}"
    resp = requests.get(url, timeout=10)
    assert (resp.status_code, resp.headers["x-ms-error-code"]) == (403, "AuthenticationFailed"), resp.text
    # With the real key the same request reaches parameter validation.
    genuine = queue_sas(azure_queue.queue_name, process=True)
    url = f"{server.azure_endpoint}/{azure_queue.queue_name}/messages?numofmessages=99&{genuine}"
    resp = requests.get(url, timeout=10)
    assert (resp.status_code, resp.headers["x-ms-error-code"]) == (400, "OutOfRangeQueryParameterValue")


def queue_sas(queue: str, **permissions) -> str:
    return generate_queue_sas(AZURE_ACCOUNT, queue, AZURE_KEY, permission=QueueSasPermissions(**permissions),
                              expiry=in_an_hour())


@pytest.mark.parametrize("granted, allowed, refused", [
    ({"read": True}, {"peek", "properties"}, {"put", "get", "update"}),
    ({"add": True}, {"put"}, {"peek", "get"}),
    ({"process": True}, {"get", "delete"}, {"put", "peek"}),
    ({"add": True, "update": True}, {"put", "update"}, {"get", "peek"}),
])
def test_a_queue_sas_enforces_read_add_update_process(server, azure_queue, granted, allowed, refused):
    sent = azure_queue.send_message("seed")
    q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=queue_sas(azure_queue.queue_name, **granted))
    actions = {
        "peek": lambda: q.peek_messages(),
        "properties": lambda: q.get_queue_properties(),
        "put": lambda: q.send_message("via queue sas"),
        "get": lambda: q.receive_message(visibility_timeout=1),
        "update": lambda: q.update_message(sent.id, pop_receipt=sent.pop_receipt, visibility_timeout=0),
        "delete": lambda: q.delete_message(sent.id, pop_receipt=sent.pop_receipt),
    }
    for name in sorted(refused):
        with pytest.raises(HttpResponseError) as ei:
            actions[name]()
        assert (ei.value.error_code, ei.value.status_code) == ("AuthorizationPermissionMismatch", 403), name
    for name in sorted(allowed):
        actions[name]()


def test_a_queue_sas_works_on_its_own_queue_only(server, azure_service, azure_queue):
    other = azure_service.create_queue(azure_name("other"))
    sas = queue_sas(azure_queue.queue_name, read=True)
    wrong = QueueClient(server.azure_endpoint, other.queue_name, credential=sas)
    expect_azure_error(wrong.peek_messages, "AuthenticationFailed", 403)


def test_a_queue_sas_can_take_its_rights_from_a_stored_access_policy(server, azure_queue):
    azure_queue.set_queue_access_policy(signed_identifiers={
        "adders": AccessPolicy(permission=QueueSasPermissions(add=True), expiry=in_an_hour())})
    sas = generate_queue_sas(AZURE_ACCOUNT, azure_queue.queue_name, AZURE_KEY, policy_id="adders")
    q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=sas)
    q.send_message("by policy")
    expect_azure_error(q.peek_messages, "AuthorizationPermissionMismatch", 403)
    unknown = generate_queue_sas(AZURE_ACCOUNT, azure_queue.queue_name, AZURE_KEY, policy_id="nobody")
    q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=unknown)
    expect_azure_error(q.send_message, "AuthenticationFailed", 403, content="x")


POLICY_CONFLICT = "Access policy fields can be associated with signature or SAS identifier but not both"


def test_a_sas_may_not_give_a_field_its_stored_access_policy_gives(server, azure_queue):
    azure_queue.set_queue_access_policy(signed_identifiers={
        "adders": AccessPolicy(permission=QueueSasPermissions(add=True), expiry=in_an_hour())})
    own_expiry = generate_queue_sas(AZURE_ACCOUNT, azure_queue.queue_name, AZURE_KEY, policy_id="adders",
                                    expiry=in_an_hour() + timedelta(days=30))
    q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=own_expiry)
    e = expect_azure_error(q.send_message, "AuthenticationFailed", 403, content="outliving the policy")
    assert error_details(e)["AuthenticationErrorDetail"] == POLICY_CONFLICT
    own_permission = generate_queue_sas(AZURE_ACCOUNT, azure_queue.queue_name, AZURE_KEY, policy_id="adders",
                                        permission=QueueSasPermissions(add=True, read=True))
    q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=own_permission)
    e = expect_azure_error(q.peek_messages, "AuthenticationFailed", 403)
    assert error_details(e)["AuthenticationErrorDetail"] == POLICY_CONFLICT
    assert azure_queue.peek_messages() == [], "nothing was sent"


def test_moving_a_stored_access_policys_expiry_to_the_past_revokes_a_sas_with_its_own_expiry(server, azure_queue):
    # The SAS gives the expiry, the policy the permissions: each field once, allowed.
    azure_queue.set_queue_access_policy(signed_identifiers={
        "adders": AccessPolicy(permission=QueueSasPermissions(add=True))})
    sas = generate_queue_sas(AZURE_ACCOUNT, azure_queue.queue_name, AZURE_KEY, policy_id="adders",
                             expiry=in_an_hour())
    q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=sas)
    q.send_message("while the policy stands")
    # The revocation Azure documents: the policy's expiry set in the past.
    azure_queue.set_queue_access_policy(signed_identifiers={
        "adders": AccessPolicy(permission=QueueSasPermissions(add=True),
                               expiry=datetime.now(timezone.utc) - timedelta(hours=1))})
    e = expect_azure_error(q.send_message, "AuthenticationFailed", 403, content="after the revocation")
    assert error_details(e)["AuthenticationErrorDetail"] == POLICY_CONFLICT
    assert [m.content for m in azure_queue.peek_messages(max_messages=32)] == ["while the policy stands"]


def test_a_sas_limited_to_another_ip_is_403_authorization_source_ip_mismatch(server, azure_queue):
    azure_queue.send_message("seed")
    elsewhere = generate_queue_sas(AZURE_ACCOUNT, azure_queue.queue_name, AZURE_KEY,
                                   permission=QueueSasPermissions(read=True), expiry=in_an_hour(), ip="10.20.30.40")
    q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=elsewhere)
    e = expect_azure_error(q.peek_messages, "AuthorizationSourceIPMismatch", 403)
    assert "127.0.0.1" in e.message
    for allowed in ("127.0.0.1", "127.0.0.0-127.0.0.255"):
        here = generate_queue_sas(AZURE_ACCOUNT, azure_queue.queue_name, AZURE_KEY,
                                  permission=QueueSasPermissions(read=True), expiry=in_an_hour(), ip=allowed)
        q = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=here)
        assert [m.content for m in q.peek_messages()] == ["seed"], allowed


def shared_key_lite_request(server, key: str, method: str, path: str, comp: str | None = None):
    """A raw request authorized with Shared Key Lite, signed as Azure's "Authorize with Shared Key" defines it
    for the Queue service (2009-09-19 and later): VERB, Content-MD5, Content-Type, Date, the canonicalized
    x-ms-* headers, then /<account><path>[?comp=...] (the account doubled in path style)."""
    import base64
    import hashlib
    import hmac
    from email.utils import formatdate

    headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2025-05-05"}
    canonical_headers = "".join(f"{name}:{headers[name]}\n" for name in sorted(headers))
    resource = f"/{AZURE_ACCOUNT}/{AZURE_ACCOUNT}{path}" + (f"?comp={comp}" if comp else "")
    string_to_sign = f"{method}\n\n\n\n{canonical_headers}{resource}"
    signature = base64.b64encode(hmac.new(base64.b64decode(key), string_to_sign.encode(), hashlib.sha256).digest())
    headers["Authorization"] = f"SharedKeyLite {AZURE_ACCOUNT}:{signature.decode()}"
    url = f"{server.azure_endpoint}{path}" + (f"?comp={comp}" if comp else "")
    return requests.request(method, url, headers=headers, timeout=10)


def test_shared_key_lite_is_verified(server, azure_queue):
    azure_queue.set_queue_metadata({"color": "blue"})
    resp = shared_key_lite_request(server, AZURE_KEY, "GET", f"/{azure_queue.queue_name}", comp="metadata")
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-ms-meta-color"] == "blue"
    listed = shared_key_lite_request(server, AZURE_KEY, "GET", "/", comp="list")
    assert listed.status_code == 200, listed.text
    assert f"<Name>{azure_queue.queue_name}</Name>" in listed.text
    wrong = shared_key_lite_request(server, WRONG_KEY, "GET", f"/{azure_queue.queue_name}", comp="metadata")
    assert (wrong.status_code, wrong.headers["x-ms-error-code"]) == (403, "AuthenticationFailed")


def test_auth_off_accepts_unsigned_requests(make_server):
    srv = make_server(extra_args=["--azure-auth", "off"])
    url = f"{srv.azure_endpoint}/unsigned"
    assert requests.put(url, timeout=10).status_code == 201
    body = "<QueueMessage><MessageText>no signature</MessageText></QueueMessage>"
    assert requests.post(f"{url}/messages", data=body, timeout=10).status_code == 201
    resp = requests.get(f"{url}/messages", params={"peekonly": "true"}, timeout=10)
    assert "<MessageText>no signature</MessageText>" in resp.text


def test_accounts_from_the_config_file_have_their_own_key_and_namespace(make_server, tmp_path):
    key = "c2VjcmV0LWtleS1vZi10aGUtdGVhbS1hY2NvdW50LTAxMjM0NTY3ODk="
    config = tmp_path / "veil.toml"
    config.write_text(f'[[azure.accounts]]\nname = "teamaccount"\nkey = "{key}"\n')
    srv = make_server(extra_args=["--config", str(config)])
    team = QueueServiceClient.from_connection_string(srv.azure_connection_string(account="teamaccount", key=key))
    team.create_queue("shared-name").send_message("team")
    dev = QueueServiceClient.from_connection_string(srv.azure_connection_string())
    dev.create_queue("shared-name")
    assert dev.get_queue_client("shared-name").peek_messages() == [], "another namespace"
    assert team.get_queue_client("shared-name").peek_messages()[0].content == "team"
    wrong = QueueServiceClient.from_connection_string(srv.azure_connection_string(account="teamaccount"))
    expect_azure_error(lambda: list(wrong.list_queues()), "AuthenticationFailed", 403)
