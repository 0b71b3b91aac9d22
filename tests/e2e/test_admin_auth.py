"""The admin endpoint's bearer token (docs/security.md "Admin endpoint") against the real `veil` binary: the API
and /metrics refuse a request without `Authorization: Bearer <token>` with 401, `WWW-Authenticate: Bearer` and
the API's JSON error; the probes stay open; the operator's audit lines name `admin`; `veil serve` refuses to
listen beyond loopback without a token; the `veil` CLI sends `--admin-token` / `VEIL_ADMIN_TOKEN`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest
import requests

from helpers import VeilServer, free_port, veil_bin

TOKEN = "admin-e2e-token"
TIMEOUT = 20


@pytest.fixture(scope="module")
def server(veil_path, tmp_path_factory):
    base = tmp_path_factory.mktemp("admin-auth")
    server = VeilServer(base / "data", extra_args=["--admin-token", TOKEN, "--log-format", "json"],
                        log_dir=base).start()
    yield server
    assert server.stop() == 0, server.log_tail()


def get(server, path: str, token: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(server.admin_endpoint + path, headers=headers, timeout=TIMEOUT)


@pytest.mark.parametrize("path", ["/api/v1/queues", "/metrics", "/api/v1/openapi.json"])
def test_without_the_token_the_admin_endpoint_answers_401_with_a_bearer_challenge(server, path):
    for token in (None, "wrong-token"):
        answer = get(server, path, token)
        assert answer.status_code == 401, answer.text
        assert answer.headers["WWW-Authenticate"] == "Bearer"
        assert answer.json()["error"]["code"] == "Unauthorized"


@pytest.mark.parametrize("path", ["/api/v1/queues", "/metrics"])
def test_with_the_token_the_admin_endpoint_answers(server, path):
    assert get(server, path, TOKEN).status_code == 200


def test_the_probes_need_no_token(server):
    assert get(server, "/healthz").status_code == 200
    assert get(server, "/readyz").status_code == 200


def test_the_operators_audit_lines_name_admin(server):
    name = f"audited-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    made = requests.post(server.admin_endpoint + "/api/v1/queues", json={"name": name}, headers=headers,
                         timeout=TIMEOUT)
    assert made.status_code in (200, 201), made.text
    deadline = time.monotonic() + 2
    while True:
        lines = [json.loads(line) for line in server.log_path.read_text().splitlines() if line.startswith("{")]
        audited = [e for e in lines if e.get("action") == "create_queue" and e.get("queue") == name]
        if audited or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert audited, "no audit line for the create"
    assert audited[0]["identity"] == "admin"


def cli(server, *args, env_token: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VEIL_ADMIN_TOKEN"}
    if env_token:
        env["VEIL_ADMIN_TOKEN"] = env_token
    return subprocess.run([veil_bin(), "--endpoint", server.admin_endpoint, *args], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)


def test_the_cli_without_the_token_is_refused(server):
    proc = cli(server, "queues", "list")
    assert proc.returncode == 1, proc
    assert "Unauthorized" in proc.stderr


def test_the_cli_sends_admin_token_from_the_flag_or_the_environment(server):
    assert cli(server, "--admin-token", TOKEN, "queues", "list").returncode == 0
    assert cli(server, "queues", "list", env_token=TOKEN).returncode == 0


def test_serve_refuses_to_listen_beyond_loopback_without_a_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "VEIL_ADMIN_TOKEN"}
    proc = subprocess.run(
        [veil_bin(), "serve", "--data-dir", str(tmp_path / "data"), "--admin-listen", f"0.0.0.0:{free_port()}",
         "--sqs-listen", f"127.0.0.1:{free_port()}", "--azure-listen", f"127.0.0.1:{free_port()}",
         "--kubemq-listen", f"127.0.0.1:{free_port()}"],
        env=env, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc
    assert "beyond loopback" in proc.stderr
    assert "--admin-token" in proc.stderr


class AdminOnEveryInterface(VeilServer):
    """A server whose admin endpoint listens on 0.0.0.0 (its port as before)."""

    def command(self) -> list[str]:
        command = super().command()
        command[command.index("--admin-listen") + 1] = f"0.0.0.0:{self.admin_port}"
        return command


def test_probes_only_lets_a_tokenless_admin_endpoint_listen_beyond_loopback_and_answer_loopback(tmp_path):
    # The container image's setting. Every connection this test can make is a loopback one, so the API answers
    # it; tests/e2e/test_image.py checks that one through a container engine's port forwarding is refused.
    server = AdminOnEveryInterface(tmp_path / "data", extra_args=["--admin-tokenless", "probes-only"])
    server.start()
    try:
        base = f"http://127.0.0.1:{server.admin_port}"
        assert requests.get(f"{base}/healthz", timeout=TIMEOUT).status_code == 200
        assert requests.get(f"{base}/api/v1/queues", timeout=TIMEOUT).status_code == 200
    finally:
        server.stop_cleanly()


# DNS rebinding (docs/security.md "Admin endpoint"): without a token, a page on another name that resolves to
# 127.0.0.1 must not read or purge queues through the operator's browser.

def admin_with_host(server, path: str, host: str, method: str = "GET", **kwargs) -> requests.Response:
    return requests.request(method, server.admin_endpoint + path, headers={"Host": host}, timeout=TIMEOUT,
                            **kwargs)


def test_without_a_token_a_request_naming_another_host_is_refused(make_server):
    open_server = make_server()
    name = f"rebinding-{uuid.uuid4().hex[:8]}"
    made = requests.post(open_server.admin_endpoint + "/api/v1/queues", json={"name": name}, timeout=TIMEOUT)
    assert made.status_code in (200, 201), made.text
    attacker = f"attacker.example:{open_server.admin_port}"
    for method, path in [("GET", "/api/v1/queues"), ("GET", "/metrics"),
                         ("GET", f"/api/v1/queues/default/{name}/messages"),
                         ("POST", f"/api/v1/queues/default/{name}/purge")]:
        answer = admin_with_host(open_server, path, attacker, method, json={"confirm": name})
        assert answer.status_code == 403, (path, answer.status_code, answer.text)
        assert answer.json()["error"]["code"] == "HostNotAllowed"
    # Loopback names and addresses are answered; the probes answer any host.
    for host in (f"127.0.0.1:{open_server.admin_port}", f"localhost:{open_server.admin_port}",
                 f"[::1]:{open_server.admin_port}"):
        assert admin_with_host(open_server, "/api/v1/queues", host).status_code == 200, host
    assert admin_with_host(open_server, "/healthz", attacker).status_code == 200


def test_a_listed_host_is_answered_without_a_token(make_server):
    listed = make_server(extra_args=["--admin-allowed-host", "veil.internal"])
    assert admin_with_host(listed, "/api/v1/queues", f"veil.internal:{listed.admin_port}").status_code == 200
    assert admin_with_host(listed, "/api/v1/queues", "other.internal").status_code == 403


def test_with_a_token_any_host_is_answered_with_the_token(server):
    headers = {"Host": "veil.example.com", "Authorization": f"Bearer {TOKEN}"}
    assert requests.get(server.admin_endpoint + "/api/v1/queues", headers=headers,
                        timeout=TIMEOUT).status_code == 200
