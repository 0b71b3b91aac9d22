"""The poison-queue policy (Azure Functions does it client-side, Veil server-side): a get that would
deliver a message already dequeued the maximum number of times moves it to the poison queue instead (same
id, text and insertion time). Set per queue with the reserved metadata `veilmaxdequeuecount` (and optionally
`veilpoisonqueue`), or server-wide for queues created through Azure with `--azure-max-dequeue-count`.
Setting a policy needs the setter's right to put messages on the poison queue (an account SAS's `a`
on objects) and to create it when it is missing; refused, it is 403 AuthorizationPermissionMismatch (tokens:
test_azure_entra.py)."""

import time
from datetime import datetime, timedelta, timezone

from azure.storage.queue import AccountSasPermissions, QueueServiceClient, ResourceTypes, generate_account_sas

from helpers import AZURE_ACCOUNT, AZURE_KEY, azure_name, expect_azure_error


def fail_processing(q, times: int):
    """Get the message `times` times, letting each 1 s visibility lapse as a crashed worker would."""
    for attempt in range(times):
        got = q.receive_message(visibility_timeout=1)
        assert got is not None, f"attempt {attempt + 1} found no message"
        time.sleep(1.1)
    return got


def test_reserved_metadata_moves_a_message_to_the_poison_queue_after_the_max_dequeue_count(azure_service):
    name = azure_name("jobs")
    q = azure_service.create_queue(name, metadata={"veilmaxdequeuecount": "2"})
    sent = q.send_message("always fails")
    fail_processing(q, 2)
    assert q.receive_message() is None, "the third get moved it aside instead of delivering it"
    poison = azure_service.get_queue_client(f"{name}-poison")
    moved = poison.peek_messages()
    assert [(m.id, m.content, m.dequeue_count) for m in moved] == [(sent.id, "always fails", 2)]
    assert moved[0].inserted_on == sent.inserted_on
    assert q.get_queue_properties().approximate_message_count == 0


def test_reserved_metadata_can_name_the_poison_queue_and_be_removed(azure_service):
    name = azure_name("named")
    dead = azure_name("dead")
    q = azure_service.create_queue(name)
    q.set_queue_metadata({"veilmaxdequeuecount": "1", "veilpoisonqueue": dead})
    q.send_message("one strike")
    fail_processing(q, 1)
    assert q.receive_message() is None
    assert [m.content for m in azure_service.get_queue_client(dead).peek_messages()] == ["one strike"]

    q.set_queue_metadata({"owner": "ops"})  # reserved keys gone: the policy goes too
    q.send_message("no policy now")
    fail_processing(q, 2)
    assert q.receive_message(visibility_timeout=1).dequeue_count == 3


def test_invalid_reserved_metadata_is_refused(azure_service):
    q = azure_service.get_queue_client(azure_name("bad"))
    expect_azure_error(q.create_queue, "InvalidMetadata", 400, metadata={"veilmaxdequeuecount": "often"})
    expect_azure_error(q.create_queue, "InvalidMetadata", 400,
                       metadata={"veilmaxdequeuecount": "3", "veilpoisonqueue": "Not_A_Queue"})


def test_the_server_default_applies_to_queues_created_through_azure(make_server):
    srv = make_server(extra_args=["--azure-max-dequeue-count", "2"])
    service = QueueServiceClient.from_connection_string(srv.azure_connection_string())
    q = service.create_queue("work")
    assert "work-poison" in [x.name for x in service.list_queues()], "created with the policy"
    q.send_message("flaky")
    fail_processing(q, 2)
    assert q.receive_message() is None
    assert [m.content for m in service.get_queue_client("work-poison").peek_messages()] == ["flaky"]
    # A queue can opt out with veilmaxdequeuecount=0.
    manual = service.create_queue("manual", metadata={"veilmaxdequeuecount": "0"})
    manual.send_message("kept")
    fail_processing(manual, 3)
    assert manual.receive_message().dequeue_count == 4


def test_the_server_default_comes_from_the_toml_config(make_server, tmp_path):
    config = tmp_path / "veil.toml"
    config.write_text("[azure]\nmax_dequeue_count = 1\n")
    srv = make_server(extra_args=["--config", str(config)])
    service = QueueServiceClient.from_connection_string(srv.azure_connection_string())
    q = service.create_queue("fragile")
    q.send_message("once")
    fail_processing(q, 1)
    assert q.receive_message() is None
    assert [m.content for m in service.get_queue_client("fragile-poison").peek_messages()] == ["once"]


def account_sas_service(server, permission: AccountSasPermissions, resource_types: ResourceTypes):
    sas = generate_account_sas(AZURE_ACCOUNT, AZURE_KEY, resource_types=resource_types, permission=permission,
                               expiry=datetime.now(timezone.utc) + timedelta(hours=1))
    return QueueServiceClient(server.azure_endpoint, credential=sas)


def test_a_poison_policy_needs_the_right_to_put_messages_on_its_poison_queue(server, azure_service):
    victim = azure_service.create_queue(azure_name("victim"))
    # Manages queues (create, metadata) but may not put a message anywhere.
    manager = account_sas_service(server, AccountSasPermissions(create=True, write=True),
                                  ResourceTypes(container=True))
    q = manager.get_queue_client(azure_name("jobs"))
    policy = {"veilmaxdequeuecount": "1", "veilpoisonqueue": victim.queue_name}
    e = expect_azure_error(q.create_queue, "AuthorizationPermissionMismatch", 403, metadata=policy)
    assert "not authorized to perform this operation using this permission" in e.message
    q.create_queue()
    expect_azure_error(q.set_queue_metadata, "AuthorizationPermissionMismatch", 403, metadata=policy)
    # Without a policy nothing is moved: the message is delivered again.
    jobs = azure_service.get_queue_client(q.queue_name)
    jobs.send_message("fails")
    fail_processing(jobs, 1)
    assert jobs.receive_message().dequeue_count == 2
    assert victim.peek_messages() == []


def test_a_sas_that_may_put_messages_and_create_queues_sets_a_poison_policy(server, azure_service):
    allowed = account_sas_service(server, AccountSasPermissions(create=True, write=True, add=True, process=True),
                                  ResourceTypes(container=True, object=True))
    poison = azure_name("made")
    q = allowed.create_queue(azure_name("jobs"), metadata={"veilmaxdequeuecount": "1", "veilpoisonqueue": poison})
    q.send_message("fails")
    fail_processing(q, 1)
    assert q.receive_message() is None
    assert [m.content for m in azure_service.get_queue_client(poison).peek_messages()] == ["fails"]
