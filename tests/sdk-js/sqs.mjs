// The AWS SDK for JavaScript v3 against Veil (tests/e2e/test_sqs_auth.py): node sqs.mjs ENDPOINT KEY SECRET QUEUE
// creates QUEUE, sends, receives and deletes one message, every request signed by the SDK, and prints one
// JSON line: {"ok": true, "body": ...} or {"ok": false, "code": <error name>, "status": <HTTP status>}.
import {
  SQSClient, CreateQueueCommand, SendMessageCommand, ReceiveMessageCommand, DeleteMessageCommand,
} from "@aws-sdk/client-sqs";

const [endpoint, accessKeyId, secretAccessKey, queue] = process.argv.slice(2);
const sqs = new SQSClient({
  endpoint, region: "us-east-1", credentials: { accessKeyId, secretAccessKey }, maxAttempts: 1,
});
try {
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: queue }));
  await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "from the js sdk" }));
  const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 1 }));
  await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: Messages[0].ReceiptHandle }));
  console.log(JSON.stringify({ ok: true, body: Messages[0].Body }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, code: error.name, status: error.$metadata?.httpStatusCode }));
}
