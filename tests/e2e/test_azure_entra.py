"""Azure Entra ID (OAuth) against the real binary, with the azure-storage-queue SDK and a token credential: tokens
are JWTs minted here with a test RSA key whose JWKS the config names (`[azure.entra] mode = "verify"`), roles
come from `[[azure.role_assignments]]` and the token's `roles` claim and map onto Veil's permissions
(docs/security.md): a Reader peeks but cannot put (403 AuthorizationPermissionMismatch), a Message Sender
puts but cannot get, a Message Processor gets and deletes, a Contributor creates queues. A token with a wrong
signature, audience or issuer, or expired, is 401 InvalidAuthenticationInfo with `WWW-Authenticate`. Dev mode
accepts a self-made token. Get User Delegation Key needs a bearer token; a user delegation SAS signed with the
key works from the SDK, within its permissions and its delegator's roles. A SAS with `spr=https` is refused
over plain HTTP (AuthorizationProtocolMismatch) and accepted over https. A poison policy needs its
setter's right to put messages on the poison queue (and to create it when missing), and keeps moving after that
right is withdrawn; without configured `audiences` only Azure Storage's own are accepted; a user delegation key
minted in dev mode does not verify after a restart in verify mode.

The SDK sends bearer tokens over https only (the client refuses a token credential for an http URL), so these
servers listen with TLS: a development certificate from `veil cert dev`, trusted by the clients through
`connection_verify=<ca.pem>`."""

import base64
import json
import subprocess
import time
import uuid
from datetime import datetime, timedelta, timezone

import jwt
import pytest
import requests
from azure.core.credentials import AccessToken
from azure.storage.queue import (
    QueueClient,
    QueueSasPermissions,
    QueueServiceClient,
    generate_queue_sas,
)
from cryptography.hazmat.primitives.asymmetric import rsa

from helpers import (AZURE_ACCOUNT, AZURE_KEY, TEST_CLOCK_ARGS, advance_clock, azure_name, error_details,
                     expect_azure_error, veil_bin)

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
ISSUER = f"https://sts.windows.net/{TENANT}/"
AUDIENCE = "https://storage.azure.com"
KID = "veil-test-key"
READER, SENDER, PROCESSOR, CONTRIBUTOR, NOBODY, CLAIMED = (str(uuid.uuid4()) for _ in range(6))
# The queues every role assignment of the config covers.
QUEUES = "entra-*"
# A Contributor on QUEUES who may also put messages on (not create) the queues of SINKS.
POISONER = str(uuid.uuid4())
SINKS = "sink-*"


def new_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


SIGNING_KEY = new_key()
OTHER_KEY = new_key()


def jwks_of(key) -> dict:
    numbers = key.public_key().public_numbers()

    def b64(n: int) -> str:
        raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": KID, "n": b64(numbers.n),
                      "e": b64(numbers.e)}]}


def token(oid: str, *, key=SIGNING_KEY, aud=AUDIENCE, iss=ISSUER, lifetime_s=3600, roles=None) -> str:
    now = int(time.time())
    claims = {"aud": aud, "iss": iss, "iat": now, "nbf": now - 60, "exp": now + lifetime_s, "oid": oid,
              "tid": TENANT, "appid": str(uuid.uuid4())}
    if roles:
        claims["roles"] = roles
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": KID})


class StaticToken:
    """A token credential whose get_token answers one JWT."""

    def __init__(self, jwt_text: str):
        self.jwt_text = jwt_text

    def get_token(self, *scopes, **kwargs) -> AccessToken:
        return AccessToken(self.jwt_text, int(time.time()) + 3600)


# The CA file every https client of this module trusts (set by `dev_cert`).
CA: dict = {}


@pytest.fixture(scope="module")
def dev_cert(veil_path, tmp_path_factory):
    """The directory of a development CA (ca.pem) and the server certificate it signed (cert.pem, key.pem)."""
    out = tmp_path_factory.mktemp("tls")
    subprocess.run([veil_bin(), "cert", "dev", "--out", str(out), "--force"], check=True, capture_output=True,
                   timeout=20)
    CA["path"] = str(out / "ca.pem")
    return out


def tls_args(cert_dir) -> list[str]:
    return ["--tls-cert", str(cert_dir / "cert.pem"), "--tls-key", str(cert_dir / "key.pem")]


def https_endpoint(server) -> str:
    return server.azure_endpoint.replace("http://", "https://", 1)


def https_options() -> dict:
    return {"connection_verify": CA["path"]}


def write_config(tmp_path, mode: str, *, audiences=(AUDIENCE, f"{AUDIENCE}/"), sinks: bool = True) -> str:
    """The config of a server verifying this module's tokens: `audiences` (none: the default), and the role
    assignments of every principal above (POISONER's right on SINKS only with `sinks`)."""
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(jwks_of(SIGNING_KEY)))
    roles = [(READER, "Storage Queue Data Reader", QUEUES), (SENDER, "Storage Queue Data Message Sender", QUEUES),
             (PROCESSOR, "Storage Queue Data Message Processor", QUEUES),
             (CONTRIBUTOR, "Storage Queue Data Contributor", QUEUES),
             (POISONER, "Storage Queue Data Contributor", QUEUES)]
    if sinks:
        roles.append((POISONER, "Storage Queue Data Message Sender", SINKS))
    assignments = "".join(
        f'[[azure.role_assignments]]\nprincipal = "{oid}"\nrole = "{role}"\naccount = "{AZURE_ACCOUNT}"\n'
        f'queues = "{queues}"\n\n'
        for oid, role, queues in roles
    )
    audience_line = f"audiences = {json.dumps(list(audiences))}\n" if audiences else ""
    config = tmp_path / f"veil-{mode}-{uuid.uuid4().hex[:6]}.toml"
    config.write_text(
        f'[azure.entra]\nmode = "{mode}"\njwks_file = "{jwks}"\nissuers = ["{ISSUER}"]\n'
        f'{audience_line}tenant = "{TENANT}"\n\n{assignments}'
    )
    return str(config)


@pytest.fixture(scope="module")
def entra_server(veil_path, tmp_path_factory, dev_cert):
    from helpers import VeilServer

    base = tmp_path_factory.mktemp("entra")
    srv = VeilServer(base / "data", log_dir=base,
                     extra_args=["--config", write_config(base, "verify"), *tls_args(dev_cert),
                                 *TEST_CLOCK_ARGS]).start()
    yield srv
    assert srv.running(), f"veil died during the tests of this module\n{srv.log_tail()}"
    srv.stop_cleanly()


def service(server, jwt_text: str) -> QueueServiceClient:
    return QueueServiceClient(https_endpoint(server), credential=StaticToken(jwt_text), **https_options())


def queue(server, jwt_text: str, name: str) -> QueueClient:
    return QueueClient(https_endpoint(server), name, credential=StaticToken(jwt_text), **https_options())


def sas_queue(server, name: str, sas: str) -> QueueClient:
    return QueueClient(https_endpoint(server), name, credential=sas, **https_options())


@pytest.fixture
def entra_queue(entra_server, request):
    """A queue the role assignments cover, created by the Contributor."""
    name = azure_name(f"entra-{request.node.name.removeprefix('test_')}")[:63]
    queue(entra_server, token(CONTRIBUTOR), name).create_queue()
    return name


def test_a_contributor_creates_queues_and_does_everything(entra_server, entra_queue):
    client = queue(entra_server, token(CONTRIBUTOR), entra_queue)
    client.send_message("by the contributor")
    [message] = client.receive_messages(visibility_timeout=1)
    client.delete_message(message)
    assert client.get_queue_properties().approximate_message_count == 0
    client.delete_queue()


def test_a_reader_peeks_but_cannot_put(entra_server, entra_queue):
    queue(entra_server, token(CONTRIBUTOR), entra_queue).send_message("to peek")
    reader = queue(entra_server, token(READER), entra_queue)
    assert [m.content for m in reader.peek_messages()] == ["to peek"]
    e = expect_azure_error(reader.send_message, "AuthorizationPermissionMismatch", 403, content="no")
    assert "not authorized to perform this operation using this permission" in e.message
    expect_azure_error(lambda: list(reader.receive_messages()), "AuthorizationPermissionMismatch", 403)


def test_a_message_sender_puts_but_cannot_get_or_peek(entra_server, entra_queue):
    sender = queue(entra_server, token(SENDER), entra_queue)
    sender.send_message("sent")
    expect_azure_error(lambda: list(sender.receive_messages()), "AuthorizationPermissionMismatch", 403)
    expect_azure_error(sender.peek_messages, "AuthorizationPermissionMismatch", 403)
    assert [m.content for m in queue(entra_server, token(READER), entra_queue).peek_messages()] == ["sent"]


def test_a_message_processor_gets_and_deletes_but_cannot_put_or_create(entra_server, entra_queue):
    queue(entra_server, token(SENDER), entra_queue).send_message("work")
    processor = queue(entra_server, token(PROCESSOR), entra_queue)
    [message] = processor.receive_messages(visibility_timeout=1)
    assert message.content == "work"
    processor.delete_message(message)
    assert processor.peek_messages() == []
    expect_azure_error(processor.send_message, "AuthorizationPermissionMismatch", 403, content="no")
    other = queue(entra_server, token(PROCESSOR), azure_name("entra-processor-made"))
    expect_azure_error(other.create_queue, "AuthorizationPermissionMismatch", 403)


def test_role_assignments_cover_only_their_queue_pattern(entra_server):
    outside = queue(entra_server, token(CONTRIBUTOR), azure_name("elsewhere"))
    expect_azure_error(outside.create_queue, "AuthorizationPermissionMismatch", 403)


def test_a_principal_without_a_role_is_refused(entra_server, entra_queue):
    stranger = queue(entra_server, token(NOBODY), entra_queue)
    expect_azure_error(stranger.peek_messages, "AuthorizationPermissionMismatch", 403)


def test_the_roles_claim_of_the_token_grants_its_storage_roles(entra_server, entra_queue):
    claimed = queue(entra_server, token(CLAIMED, roles=["Storage Queue Data Message Sender"]), entra_queue)
    claimed.send_message("by claim")
    expect_azure_error(claimed.peek_messages, "AuthorizationPermissionMismatch", 403)


def test_a_listing_shows_only_the_queues_a_role_covers(entra_server, entra_queue):
    names = [q.name for q in service(entra_server, token(READER)).list_queues()]
    assert entra_queue in names
    assert all(name.startswith("entra-") for name in names)


@pytest.mark.parametrize("forged", [
    pytest.param(lambda: token(CONTRIBUTOR, key=OTHER_KEY), id="wrong-signature"),
    pytest.param(lambda: token(CONTRIBUTOR, aud="https://vault.azure.net"), id="wrong-audience"),
    pytest.param(lambda: token(CONTRIBUTOR, iss="https://sts.windows.net/another-tenant/"), id="wrong-issuer"),
    pytest.param(lambda: token(CONTRIBUTOR, lifetime_s=-600), id="expired"),
])
def test_a_bad_token_is_401_invalid_authentication_info_with_www_authenticate(entra_server, entra_queue, forged):
    client = queue(entra_server, forged(), entra_queue)
    e = expect_azure_error(client.peek_messages, "InvalidAuthenticationInfo", 401)
    assert e.response.headers["WWW-Authenticate"] == (
        f"Bearer authorization_uri=https://login.microsoftonline.com/{TENANT}/oauth2/authorize "
        "resource_id=https://storage.azure.com"
    )
    assert error_details(e)["AuthenticationErrorDetail"]


def test_the_detail_tells_an_expired_token_from_a_forged_one(entra_server, entra_queue):
    expired = queue(entra_server, token(CONTRIBUTOR, lifetime_s=-600), entra_queue)
    e = expect_azure_error(expired.peek_messages, "InvalidAuthenticationInfo", 401)
    assert "expired" in error_details(e)["AuthenticationErrorDetail"]
    forged = queue(entra_server, token(CONTRIBUTOR, key=OTHER_KEY), entra_queue)
    e = expect_azure_error(forged.peek_messages, "InvalidAuthenticationInfo", 401)
    assert "Signature validation failed" in error_details(e)["AuthenticationErrorDetail"]


def test_a_token_within_entra_clock_skew_is_still_accepted(entra_server, entra_queue):
    just_expired = queue(entra_server, token(CONTRIBUTOR, lifetime_s=-60), entra_queue)
    just_expired.peek_messages()


def test_a_bearer_token_needs_version_2017_11_09(entra_server, entra_queue):
    resp = requests.get(
        f"{https_endpoint(entra_server)}/{entra_queue}/messages", params={"peekonly": "true"},
        headers={"Authorization": f"Bearer {token(CONTRIBUTOR)}", "x-ms-version": "2017-07-29"}, timeout=2,
        verify=CA["path"],
    )
    assert (resp.status_code, resp.headers["x-ms-error-code"]) == (403, "AuthenticationFailed")


def test_dev_mode_accepts_a_self_made_token(make_server, dev_cert):
    server = make_server(extra_args=["--azure-entra", "dev", *tls_args(dev_cert)])
    self_made = jwt.encode({"oid": "me", "exp": int(time.time()) + 600}, "any secret", algorithm="HS256")
    name = azure_name("dev-mode")
    client = queue(server, self_made, name)
    client.create_queue()
    client.send_message("dev")
    assert [m.content for m in client.peek_messages()] == ["dev"]


def test_tokens_are_refused_when_entra_is_off(make_server, dev_cert):
    server = make_server(extra_args=tls_args(dev_cert))
    client = queue(server, token(CONTRIBUTOR), azure_name("entra-off"))
    expect_azure_error(client.create_queue, "InvalidAuthenticationInfo", 401)


def user_delegation_key(server, jwt_text: str):
    now = datetime.now(timezone.utc)
    # The SDK formats `start` unconditionally, so it must be given.
    return service(server, jwt_text).get_user_delegation_key(start=now, expiry=now + timedelta(hours=1))


def test_get_user_delegation_key_answers_a_key_for_the_tokens_principal(entra_server):
    key = user_delegation_key(entra_server, token(PROCESSOR))
    assert (key.signed_oid, key.signed_tid, key.signed_service) == (PROCESSOR, TENANT, "q")
    assert len(base64.b64decode(key.value)) == 32


def test_get_user_delegation_key_refuses_a_key_beyond_seven_days(entra_server):
    now = datetime.now(timezone.utc)
    expect_azure_error(service(entra_server, token(CONTRIBUTOR)).get_user_delegation_key, "InvalidXmlNodeValue",
                       400, start=now, expiry=now + timedelta(days=8))


def test_get_user_delegation_key_needs_a_bearer_token(entra_server):
    shared_key = QueueServiceClient(https_endpoint(entra_server),
                                    credential={"account_name": AZURE_ACCOUNT, "account_key": AZURE_KEY},
                                    **https_options())
    e = expect_azure_error(shared_key.get_user_delegation_key, "AuthenticationFailed", 403,
                           start=datetime.now(timezone.utc), expiry=datetime.now(timezone.utc) + timedelta(hours=1))
    assert "Bearer" in error_details(e)["AuthenticationErrorDetail"]


def delegation_sas(server, delegator: str, queue_name: str, permission: QueueSasPermissions, **kwargs) -> str:
    key = user_delegation_key(server, token(delegator))
    return generate_queue_sas(AZURE_ACCOUNT, queue_name, account_key=None, user_delegation_key=key,
                              permission=permission, expiry=datetime.now(timezone.utc) + timedelta(hours=1),
                              **kwargs)


def test_a_user_delegation_sas_works_from_the_sdk_within_its_permissions(entra_server, entra_queue):
    sas = delegation_sas(entra_server, CONTRIBUTOR, entra_queue, QueueSasPermissions(add=True, read=True))
    client = sas_queue(entra_server, entra_queue, sas)
    client.send_message("delegated")
    assert [m.content for m in client.peek_messages()] == ["delegated"]
    expect_azure_error(lambda: list(client.receive_messages()), "AuthorizationPermissionMismatch", 403)


def test_a_user_delegation_sas_is_limited_by_its_delegators_roles(entra_server, entra_queue):
    sas = delegation_sas(entra_server, READER, entra_queue, QueueSasPermissions(add=True, read=True))
    client = sas_queue(entra_server, entra_queue, sas)
    client.peek_messages()
    expect_azure_error(client.send_message, "AuthorizationPermissionMismatch", 403, content="beyond the reader")


def test_a_user_delegation_sas_of_a_forged_key_is_refused(entra_server, entra_queue):
    key = user_delegation_key(entra_server, token(CONTRIBUTOR))
    key.value = base64.b64encode(b"\x00" * 32).decode()
    sas = generate_queue_sas(AZURE_ACCOUNT, entra_queue, account_key=None, user_delegation_key=key,
                             permission=QueueSasPermissions(read=True),
                             expiry=datetime.now(timezone.utc) + timedelta(hours=1))
    client = sas_queue(entra_server, entra_queue, sas)
    expect_azure_error(client.peek_messages, "AuthenticationFailed", 403)


def test_a_user_delegation_key_survives_a_restart(make_server, tmp_path, dev_cert):
    server = make_server(extra_args=["--config", write_config(tmp_path, "verify"), *tls_args(dev_cert)])
    name = azure_name("entra-restart")
    queue(server, token(CONTRIBUTOR), name).create_queue()
    sas = delegation_sas(server, CONTRIBUTOR, name, QueueSasPermissions(add=True))
    server.stop_cleanly()
    server.start()
    sas_queue(server, name, sas).send_message("after the restart")


def test_a_sas_for_https_only_works_over_https(entra_server, entra_queue):
    sas = delegation_sas(entra_server, CONTRIBUTOR, entra_queue, QueueSasPermissions(read=True), protocol="https")
    assert "spr=https" in sas
    sas_queue(entra_server, entra_queue, sas).peek_messages()


def test_a_sas_for_https_only_is_refused_over_http(server, azure_queue):
    sas = generate_queue_sas(AZURE_ACCOUNT, azure_queue.queue_name, account_key=AZURE_KEY,
                             permission=QueueSasPermissions(read=True), protocol="https",
                             expiry=datetime.now(timezone.utc) + timedelta(hours=1))
    client = QueueClient(server.azure_endpoint, azure_queue.queue_name, credential=sas)
    expect_azure_error(client.peek_messages, "AuthorizationProtocolMismatch", 403)


def owner(server) -> QueueServiceClient:
    """The account key's client over https: the owner of the account."""
    return QueueServiceClient(https_endpoint(server), credential={"account_name": AZURE_ACCOUNT,
                                                                  "account_key": AZURE_KEY}, **https_options())


def poison_policy(poison_queue: str, max_dequeue_count: int = 1) -> dict:
    return {"veilmaxdequeuecount": str(max_dequeue_count), "veilpoisonqueue": poison_queue}


def test_a_poison_policy_into_a_queue_the_caller_cannot_put_to_is_refused(entra_server, entra_queue):
    victim = owner(entra_server).create_queue(azure_name("victim"))
    contributor = queue(entra_server, token(CONTRIBUTOR), azure_name("entra-poisoning"))
    e = expect_azure_error(contributor.create_queue, "AuthorizationPermissionMismatch", 403,
                           metadata=poison_policy(victim.queue_name))
    assert "not authorized to perform this operation using this permission" in e.message
    existing = queue(entra_server, token(CONTRIBUTOR), entra_queue)
    expect_azure_error(existing.set_queue_metadata, "AuthorizationPermissionMismatch", 403,
                       metadata=poison_policy(victim.queue_name))
    assert existing.get_queue_properties().metadata == {}, "no policy was set"
    assert victim.peek_messages() == []


def test_a_poison_policy_into_a_queue_the_caller_may_put_to_moves_messages_there(entra_server):
    sink = owner(entra_server).create_queue(azure_name("sink"))
    poisoner = queue(entra_server, token(POISONER), azure_name("entra-poisoned"))
    poisoner.create_queue(metadata=poison_policy(sink.queue_name))
    poisoner.send_message("fails once")
    poisoner.receive_message(visibility_timeout=1)
    advance_clock(entra_server, 2, ca=CA["path"])
    assert poisoner.receive_message() is None, "moved to the poison queue"
    assert [m.content for m in sink.peek_messages()] == ["fails once"]


def test_a_poison_policy_needs_the_right_to_create_a_missing_poison_queue(entra_server):
    missing = azure_name("sink")
    poisoner = queue(entra_server, token(POISONER), azure_name("entra-poisoned"))
    expect_azure_error(poisoner.create_queue, "AuthorizationPermissionMismatch", 403,
                       metadata=poison_policy(missing))
    expect_azure_error(owner(entra_server).get_queue_client(missing).get_queue_properties, "QueueNotFound", 404)
    # A Contributor on both queues creates the poison queue with the policy.
    contributor = queue(entra_server, token(CONTRIBUTOR), azure_name("entra-poisoned"))
    made = azure_name("entra-made-poison")
    contributor.create_queue(metadata=poison_policy(made))
    owner(entra_server).get_queue_client(made).get_queue_properties()


def test_a_poison_policy_keeps_moving_after_the_callers_right_is_withdrawn(make_server, tmp_path, dev_cert):
    server = make_server(extra_args=["--config", write_config(tmp_path, "verify"), *tls_args(dev_cert),
                                     *TEST_CLOCK_ARGS])
    sink = azure_name("sink")
    owner(server).create_queue(sink)
    name = azure_name("entra-withdrawn")
    queue(server, token(POISONER), name).create_queue(metadata=poison_policy(sink))
    queue(server, token(POISONER), name).send_message("outlives the right")
    # The right to put into the poison queue is withdrawn: the policy was authorized when it was set.
    server.stop_cleanly()
    server.extra_args = ["--config", write_config(tmp_path, "verify", sinks=False), *tls_args(dev_cert),
                         *TEST_CLOCK_ARGS]
    server.start()
    poisoner = queue(server, token(POISONER), name)
    expect_azure_error(queue(server, token(POISONER), sink).send_message, "AuthorizationPermissionMismatch", 403,
                       content="withdrawn")
    poisoner.receive_message(visibility_timeout=1)
    advance_clock(server, 2, ca=CA["path"])
    assert poisoner.receive_message() is None
    assert [m.content for m in owner(server).get_queue_client(sink).peek_messages()] == ["outlives the right"]


def test_without_configured_audiences_a_token_for_another_application_is_refused(make_server, tmp_path, dev_cert):
    server = make_server(extra_args=["--config", write_config(tmp_path, "verify", audiences=()),
                                     *tls_args(dev_cert)])
    name = azure_name("entra-audience")
    other_app = token(CLAIMED, aud="api://some-other-app", roles=["Storage Queue Data Contributor"])
    e = expect_azure_error(queue(server, other_app, name).create_queue, "InvalidAuthenticationInfo", 401)
    assert error_details(e)["AuthenticationErrorDetail"].startswith("Audience validation failed")
    for storage_audience in ("https://storage.azure.com", "https://storage.azure.com/",
                             f"https://{AZURE_ACCOUNT}.queue.core.windows.net",
                             f"https://{AZURE_ACCOUNT}.queue.core.windows.net/"):
        queue(server, token(CONTRIBUTOR, aud=storage_audience), azure_name("entra-audience")).create_queue()


def test_a_user_delegation_key_minted_in_dev_mode_does_not_outlive_the_switch_to_verify_mode(
        make_server, tmp_path, dev_cert):
    server = make_server(extra_args=["--azure-entra", "dev", *tls_args(dev_cert)])
    # Dev mode takes this self-made token for the CONTRIBUTOR, whom verify mode's role assignments know too.
    forged = jwt.encode({"oid": CONTRIBUTOR, "tid": TENANT, "exp": int(time.time()) + 600}, "any secret",
                        algorithm="HS256")
    name = azure_name("entra-dev-key")
    queue(server, forged, name).create_queue()
    key = user_delegation_key(server, forged)
    sas = generate_queue_sas(AZURE_ACCOUNT, name, account_key=None, user_delegation_key=key,
                             permission=QueueSasPermissions(add=True),
                             expiry=datetime.now(timezone.utc) + timedelta(hours=1))
    sas_queue(server, name, sas).send_message("in dev mode")
    server.stop_cleanly()
    server.extra_args = ["--config", write_config(tmp_path, "verify"), *tls_args(dev_cert)]
    server.start()
    e = expect_azure_error(sas_queue(server, name, sas).send_message, "AuthenticationFailed", 403,
                           content="after the switch")
    assert error_details(e)["AuthenticationErrorDetail"].startswith("Signature did not match")
    assert [m.content for m in owner(server).get_queue_client(name).peek_messages(max_messages=32)] == ["in dev mode"]
