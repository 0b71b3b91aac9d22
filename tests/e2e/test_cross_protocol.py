"""One namespace across protocols (docs/semantics.md §7): the SQS default account/region and the Azure development account
share Veil's default namespace. A message sent with boto3 to `orders` is peeked, got, updated and deleted with
the Azure SDK, and a message put with the Azure SDK is received and deleted with boto3; bodies are the same
bytes, rendered as text by each protocol. (Other Azure accounts being separate namespaces is checked in
test_azure_auth.py with a configured account.)"""

from helpers import azure_name, counts, receive, receive_one


def test_a_message_sent_with_boto3_is_peeked_got_updated_by_azure_and_deleted_by_boto3(sqs, azure_service):
    name = azure_name("sqs-to-azure")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="from boto3 <&> ünïcode")
    q = azure_service.get_queue_client(name)
    peeked = q.peek_messages()
    assert [(m.id, m.content) for m in peeked] == [(sent["MessageId"], "from boto3 <&> ünïcode")]
    got = q.receive_message(visibility_timeout=30)
    assert (got.id, got.dequeue_count) == (sent["MessageId"], 1)
    assert receive(sqs, url) == [], "hidden for SQS too"
    assert counts(sqs, url) == (0, 1, 0)
    q.update_message(got, content="edited by azure", visibility_timeout=0)
    back = receive_one(sqs, url, VisibilityTimeout=30, MessageSystemAttributeNames=["All"])
    assert (back["MessageId"], back["Body"]) == (sent["MessageId"], "edited by azure")
    assert back["Attributes"]["ApproximateReceiveCount"] == "2"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=back["ReceiptHandle"])
    # Counted, not peeked: a peek would show nothing for the still-hidden message whether or not it was deleted.
    assert q.get_queue_properties().approximate_message_count == 0, "the SQS delete left the message in the queue"


def test_a_message_put_with_azure_is_received_and_deleted_by_boto3(sqs, azure_service):
    name = azure_name("azure-to-sqs")
    q = azure_service.create_queue(name)
    sent = q.send_message("from the azure sdk")
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    m = receive_one(sqs, url, VisibilityTimeout=30)
    assert (m["MessageId"], m["Body"]) == (sent.id, "from the azure sdk")
    assert q.peek_messages() == [], "hidden for Azure too"
    assert q.get_queue_properties().approximate_message_count == 1
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert q.get_queue_properties().approximate_message_count == 0


def test_an_azure_delete_removes_what_boto3_sent(sqs, azure_service):
    name = azure_name("boto-then-azure-delete")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="settle me")
    q = azure_service.get_queue_client(name)
    got = q.receive_message(visibility_timeout=30)
    assert got.content == "settle me"
    assert counts(sqs, url) == (0, 1, 0)
    q.delete_message(got)
    # Counted, not received: a receive would find nothing for the still-hidden message whether or not it was deleted.
    assert counts(sqs, url) == (0, 0, 0), "the Azure delete left the message in the queue"


def test_a_queue_created_with_boto3_is_listed_and_described_by_azure(sqs, azure_service):
    name = azure_name("listed")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="counted")
    assert [q.name for q in azure_service.list_queues(name_starts_with=name)] == [name]
    assert azure_service.get_queue_client(name).get_queue_properties().approximate_message_count == 1
