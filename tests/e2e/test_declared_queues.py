"""Queues declared in the config file (README.md "Queues declared in the config file"): `[[queues]]` entries are
created at start with their settings, FIFO kind, dead-letter rule, tags and metadata, idempotently; a restart
with a changed entry updates the queue; nothing the list leaves out is deleted or changed; a bad entry stops the
start with an error naming it. `veil queues apply FILE` does the same against a running server, `--dry-run`
only says what would change. Checked through the real SDKs (boto3, the Azure SDK) and the CLI."""

from __future__ import annotations

import json
import subprocess
import uuid

from azure.storage.queue import QueueServiceClient

from helpers import VeilServer, free_port, make_client, veil_bin

TIMEOUT = 30


def config_text(tag: str, visibility: int = 45) -> str:
    return f"""
[[queues]]
name = "orders-{tag}"
visibility_timeout_s = {visibility}
retention_s = 86400
dead_letter = {{ queue = "orders-{tag}-dlq", max_receive_count = 3 }}
tags = {{ team = "payments" }}
metadata = {{ owner = "ops" }}

[[queues]]
name = "orders-{tag}-dlq"

[[queues]]
name = "events-{tag}.fifo"
namespace = "default"
fifo = true
delay_s = 2
"""


def cli(server: VeilServer, *args: str, check: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([veil_bin(), "--endpoint", server.admin_endpoint, *args], capture_output=True,
                          text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert proc.returncode == check, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def attributes(sqs, name: str) -> dict:
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]


def test_declared_queues_are_created_at_start_and_updated_at_the_next(tmp_path):
    tag = uuid.uuid4().hex[:6]
    config = tmp_path / "veil.toml"
    config.write_text(config_text(tag))
    server = VeilServer(tmp_path / "data", log_dir=tmp_path, extra_args=["--config", str(config)]).start()
    try:
        sqs = make_client(server.endpoint)
        orders = attributes(sqs, f"orders-{tag}")
        assert orders["VisibilityTimeout"] == "45" and orders["MessageRetentionPeriod"] == "86400"
        policy = json.loads(orders["RedrivePolicy"])
        assert policy["deadLetterTargetArn"].endswith(f":orders-{tag}-dlq") and int(policy["maxReceiveCount"]) == 3
        url = sqs.get_queue_url(QueueName=f"orders-{tag}")["QueueUrl"]
        assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "payments"}
        azure = QueueServiceClient.from_connection_string(server.azure_connection_string())
        assert azure.get_queue_client(f"orders-{tag}").get_queue_properties().metadata == {"owner": "ops"}
        events = attributes(sqs, f"events-{tag}.fifo")
        assert events["FifoQueue"] == "true" and events["DelaySeconds"] == "2"
        stats = json.loads(cli(server, "--output", "json", "queues", "stats", f"orders-{tag}").stdout)
        assert stats["queue"]["created_by"] == "config"

        # A client's own change, a queue the list does not name and a tag it does not list all stay.
        sqs.tag_queue(QueueUrl=url, Tags={"extra": "kept"})
        sqs.create_queue(QueueName=f"unlisted-{tag}")
        server.stop_cleanly()
        config.write_text(config_text(tag, visibility=90))
        server.start()
        assert attributes(sqs, f"orders-{tag}")["VisibilityTimeout"] == "90"
        assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "payments", "extra": "kept"}
        sqs.get_queue_url(QueueName=f"unlisted-{tag}")  # still there
        # The same file again changes nothing.
        unchanged = json.loads(cli(server, "--output", "json", "queues", "apply", str(config)).stdout)
        assert [c["action"] for c in unchanged["changes"]] == ["unchanged"] * 3, unchanged
    finally:
        server.kill()


def refused_start(tmp_path, config_text: str) -> subprocess.CompletedProcess:
    """`veil serve` with this config file, on free ports in case it does start (then the test fails)."""
    config = tmp_path / "veil.toml"
    config.write_text(config_text)
    ports = [f"127.0.0.1:{free_port()}" for _ in range(4)]
    done = subprocess.run([veil_bin(), "serve", "--config", str(config), "--data-dir", str(tmp_path / "data"),
                           "--sqs-listen", ports[0], "--azure-listen", ports[1], "--kubemq-listen", ports[2],
                           "--admin-listen", ports[3]],
                          capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, (done.returncode, done.stderr)
    return done


def test_a_bad_entry_stops_the_start_naming_it(tmp_path):
    done = refused_start(
        tmp_path, '[[queues]]\nname = "fine"\n\n[[queues]]\nname = "slow"\nvisibility_timeout_s = 99999999\n')
    assert "queues[2] (default/slow): visibility_timeout_s must be at most" in done.stderr, done.stderr
    assert "visibility_timeout" in refused_start(tmp_path, '[[queues]]\nname = "typo"\nvisibility_timeout = 5\n').stderr
    twice = refused_start(tmp_path, '[[queues]]\nname = "a"\n\n[[queues]]\nname = "a"\n')
    assert "queues[2] (default/a): the list declares this queue twice" in twice.stderr, twice.stderr


def test_queues_apply_with_dry_run_changes_nothing_then_applies(server, tmp_path):
    tag = uuid.uuid4().hex[:6]
    file = tmp_path / "queues.toml"
    file.write_text(config_text(tag))
    dry = cli(server, "queues", "apply", str(file), "--dry-run").stdout
    assert f"orders-{tag}" in dry and "would create" in dry, dry
    assert "visibility_timeout_s 30 -> 45" in dry, dry
    cli(server, "queues", "stats", f"orders-{tag}", check=4)  # nothing was created

    applied = json.loads(cli(server, "--output", "json", "queues", "apply", str(file)).stdout)
    assert [c["action"] for c in applied["changes"]] == ["create"] * 3, applied
    assert any("dead_letter" in d for d in applied["changes"][0]["details"]), applied
    stats = json.loads(cli(server, "--output", "json", "queues", "stats", f"orders-{tag}").stdout)
    assert stats["settings"]["visibility_timeout_s"] == 45
    assert stats["dead_letter"]["dead_letter_queue"]["name"] == f"orders-{tag}-dlq"

    again = cli(server, "queues", "apply", str(file), "--dry-run").stdout
    row = next(line for line in again.splitlines() if line.startswith(f"default/orders-{tag} "))
    assert row.split()[1:] == ["unchanged", "-"], again

    file.write_text(config_text(tag, visibility=60))
    table = cli(server, "queues", "apply", str(file)).stdout
    row = next(line for line in table.splitlines() if line.startswith(f"default/orders-{tag} "))
    assert "update" in row and "visibility_timeout_s 45 -> 60" in row, table


def test_queues_apply_refuses_a_change_of_kind_and_changes_nothing(server, tmp_path):
    tag = uuid.uuid4().hex[:6]
    cli(server, "queues", "create", f"standard-{tag}")
    file = tmp_path / "queues.toml"
    file.write_text(f'[[queues]]\nname = "new-{tag}"\n\n[[queues]]\nname = "standard-{tag}"\nfifo = true\n')
    proc = cli(server, "queues", "apply", str(file), check=1)
    assert f"queues[2] (default/standard-{tag}): exists as a standard queue" in proc.stderr, proc.stderr
    cli(server, "queues", "stats", f"new-{tag}", check=4)  # the good entry was not applied either
    missing = tmp_path / "none.toml"
    missing.write_text('log_level = "info"\n')
    assert "declares no [[queues]]" in cli(server, "queues", "apply", str(missing), check=2).stderr
