"""The az CLI (azure-cli, in the venv .venv-az beside the test venv, since it pins its own SDK) running an operator's runbook commands against Veil with a
connection string: `az storage message put/peek/get/update/delete` and `az storage queue metadata show`,
plus queue create and the CLI's report of a service error."""

import json
import os
import subprocess

import pytest

from helpers import az_executable, azure_name


@pytest.fixture(scope="module")
def az(azure_conn, tmp_path_factory):
    home = tmp_path_factory.mktemp("az-home")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "AZURE_CONFIG_DIR": str(home / ".azure"),
        "AZURE_CORE_COLLECT_TELEMETRY": "false",
        "AZURE_CORE_NO_COLOR": "true",
        "AZURE_CORE_SURVEY_MESSAGE": "false",
        "AZURE_CORE_ONLY_SHOW_ERRORS": "true",
        "AZURE_STORAGE_CONNECTION_STRING": azure_conn,
    }
    exe = az_executable()

    def run(*args, check=True):
        cmd = [exe, *args, "--connection-string", azure_conn, "--output", "json"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if check:
            detail = f"az {' '.join(args)} exited {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
            assert proc.returncode == 0, detail
            try:
                return json.loads(proc.stdout) if proc.stdout.strip() else {}
            except json.JSONDecodeError as error:
                raise AssertionError(f"{detail}\nnot JSON: {error}") from error
        return proc

    return run


def test_seed_runbook_peek_get_update_delete_and_metadata_show(az):
    queue = azure_name("cli")
    az("storage", "queue", "create", "--name", queue, "--metadata", "team=ops")
    put = az("storage", "message", "put", "--queue-name", queue, "--content", "inspect me")
    assert put["id"] and put["popReceipt"]

    peeked = az("storage", "message", "peek", "--queue-name", queue, "--num-messages", "5")
    assert [(m["id"], m["content"], m["dequeueCount"]) for m in peeked] == [(put["id"], "inspect me", 0)]

    got = az("storage", "message", "get", "--queue-name", queue, "--visibility-timeout", "300")
    assert len(got) == 1 and got[0]["id"] == put["id"] and got[0]["dequeueCount"] == 1
    assert az("storage", "message", "peek", "--queue-name", queue, "--num-messages", "5") == [], "hidden"

    updated = az("storage", "message", "update", "--queue-name", queue, "--id", got[0]["id"],
                 "--pop-receipt", got[0]["popReceipt"], "--visibility-timeout", "0", "--content", "updated")
    assert updated["popReceipt"] != got[0]["popReceipt"]
    assert [m["content"] for m in az("storage", "message", "peek", "--queue-name", queue)] == ["updated"]

    stale = az("storage", "message", "delete", "--queue-name", queue, "--id", got[0]["id"],
               "--pop-receipt", got[0]["popReceipt"], check=False)
    assert stale.returncode != 0 and "MessageNotFound" in stale.stderr, stale.stderr
    az("storage", "message", "delete", "--queue-name", queue, "--id", got[0]["id"],
       "--pop-receipt", updated["popReceipt"])
    assert az("storage", "message", "peek", "--queue-name", queue) == []

    metadata = az("storage", "queue", "metadata", "show", "--name", queue)
    assert metadata == {"team": "ops"}
