"""SQS `SenderId` (docs/security.md, "SQS sender ids"; issue 44, item 7): a receiver sees an opaque id of the
sender's credential in the shape of an IAM user's unique id (`AIDA` + 17 upper-case letters and digits), never
the sender's access key id; the id is the same for every send with one key, also after a restart (it derives
from the secret kept in the data directory) and on every node of a cluster (the cluster's secret, in its
database), and differs between keys."""

from __future__ import annotations

import re

import boto3
from botocore.config import Config

from helpers import ACCOUNT, DEFAULT_REGION, VeilServer, make_client
from pg_support import Cluster, PgServer

KEY_A = "AKIDSENDERA"
KEY_B = "AKIDSENDERB"
CONFIG = f"""
[sqs]
[[sqs.credentials]]
access_key = "{KEY_A}"
secret_key = "secret-a"
account_id = "{ACCOUNT}"

[[sqs.credentials]]
access_key = "{KEY_B}"
secret_key = "secret-b"
account_id = "{ACCOUNT}"
"""
IAM_UNIQUE_ID = re.compile(r"AIDA[A-Z0-9]{17}")


def client(server: VeilServer, key: str, secret: str):
    return boto3.client("sqs", endpoint_url=server.endpoint, region_name=DEFAULT_REGION, aws_access_key_id=key,
                        aws_secret_access_key=secret,
                        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))


def sender_ids(sqs, url: str) -> dict[str, str]:
    """Body → SenderId of every message of the queue (each kept hidden while the rest are read)."""
    shown = {}
    while True:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60,
                                       MessageSystemAttributeNames=["SenderId"]).get("Messages", [])
        if not messages:
            return shown
        shown.update({m["Body"]: m["Attributes"]["SenderId"] for m in messages})


def test_sender_id_is_an_opaque_stable_id_per_credential_never_the_access_key(veil_path, tmp_path):
    config = tmp_path / "veil.toml"
    config.write_text(CONFIG)
    server = VeilServer(tmp_path / "data", log_dir=tmp_path, extra_args=["--config", str(config)]).start()
    try:
        a = client(server, KEY_A, "secret-a")
        b = client(server, KEY_B, "secret-b")
        url = a.create_queue(QueueName="sender-ids")["QueueUrl"]
        a.send_message(QueueUrl=url, MessageBody="a1")
        a.send_message(QueueUrl=url, MessageBody="a2")
        b.send_message(QueueUrl=url, MessageBody="b1")
        server.stop_cleanly()
        server.start()
        a = client(server, KEY_A, "secret-a")
        a.send_message(QueueUrl=url, MessageBody="a3")
        shown = sender_ids(client(server, KEY_B, "secret-b"), url)
    finally:
        if server.running():
            server.stop_cleanly()
    assert set(shown) == {"a1", "a2", "a3", "b1"}
    for body, sender in shown.items():
        assert IAM_UNIQUE_ID.fullmatch(sender), f"{body}: {sender!r} is not shaped like an IAM unique id"
        assert KEY_A not in sender and KEY_B not in sender, f"{body}: the access key reached the receiver"
    assert shown["a1"] == shown["a2"] == shown["a3"], "one key's id changed between sends or across the restart"
    assert shown["b1"] != shown["a1"], "two keys share an id"


def test_sender_id_is_the_same_whichever_node_of_a_cluster_the_sender_entered(veil_path, tmp_path):
    pg = PgServer("pg-sender-id").init().start()
    cluster = Cluster(pg, tmp_path / "cluster", size=2)
    try:
        cluster.start()
        first, second = (make_client(node.endpoint) for node in cluster.nodes)
        url = first.create_queue(QueueName="sender-ids")["QueueUrl"]
        first.send_message(QueueUrl=url, MessageBody="through node1")
        url = second.get_queue_url(QueueName="sender-ids")["QueueUrl"]
        second.send_message(QueueUrl=url, MessageBody="through node2")
        shown = sender_ids(second, url)
    finally:
        cluster.kill_all()
        pg.destroy()
    assert set(shown) == {"through node1", "through node2"}
    assert shown["through node1"] == shown["through node2"], "the nodes derive different ids for one key"
    assert IAM_UNIQUE_ID.fullmatch(shown["through node1"]), shown
