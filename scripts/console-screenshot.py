#!/usr/bin/env python3
"""Regenerates docs/images/console.png, the README's picture of the web console.

Starts a throwaway `veil serve` (VEIL_BIN, default target/release/veil) with the e2e suite's helpers, fills a
few queues through SQS, Azure and the admin API (some messages in flight, some delayed, a dead-letter queue
fed by a RedrivePolicy), opens the console in the system Chromium (CHROMIUM, or `chromium` on PATH) and
captures the page with the DLQ selected, at a desktop's size and at a phone's (375 px wide, written beside it
as `<name>-phone.png`), and the delivery-history dialog of a message delivered several times
(`<name>-history.png`).
Usage: .venv/bin/python scripts/console-screenshot.py [output.png]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import requests  # noqa: E402
from azure.storage.queue import QueueServiceClient  # noqa: E402
from playwright.sync_api import expect, sync_playwright  # noqa: E402

from helpers import VeilServer, make_client  # noqa: E402


def fill(server: VeilServer) -> None:
    sqs = make_client(server.endpoint)
    dlq = sqs.create_queue(QueueName="orders-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    orders = sqs.create_queue(
        QueueName="orders",
        Attributes={"RedrivePolicy": f'{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}'},
    )["QueueUrl"]
    for i in range(3):
        sqs.send_message(QueueUrl=orders, MessageBody=f'{{"order": {9000 + i}, "sku": "broken"}}',
                         MessageAttributes={"source": {"DataType": "String", "StringValue": "checkout"}})
    for _ in range(2):  # receive twice with no visibility: the second receive dead-letters them
        for _ in range(3):
            sqs.receive_message(QueueUrl=orders, MaxNumberOfMessages=10, VisibilityTimeout=0)
    for i in range(40):
        sqs.send_message(QueueUrl=orders, MessageBody=f'{{"order": {1000 + i}, "sku": "A-{i % 7}"}}',
                         MessageAttributes={"source": {"DataType": "String", "StringValue": "checkout"}})
    sqs.receive_message(QueueUrl=orders, MaxNumberOfMessages=10, VisibilityTimeout=600)
    sqs.send_message(QueueUrl=orders, MessageBody='{"order": 2000}', DelaySeconds=600)

    events = sqs.create_queue(QueueName="events.fifo", Attributes={"FifoQueue": "true",
                                                                   "ContentBasedDeduplication": "true"})["QueueUrl"]
    for i in range(12):
        sqs.send_message(QueueUrl=events, MessageBody=f"event {i}", MessageGroupId=f"tenant-{i % 3}")

    azure = QueueServiceClient.from_connection_string(server.azure_connection_string())
    thumbs = azure.get_queue_client("thumbnails")
    thumbs.create_queue()
    for i in range(25):
        thumbs.send_message(f"resize image-{i}.jpg")
    thumbs.receive_messages(messages_per_page=5, visibility_timeout=600).by_page().__next__()

    often = sqs.create_queue(QueueName="often")["QueueUrl"]
    sqs.send_message(QueueUrl=often, MessageBody="fails every time")
    for _ in range(8):
        sqs.receive_message(QueueUrl=often, VisibilityTimeout=0, WaitTimeSeconds=1)

    api = f"{server.admin_endpoint}/api/v1"
    requests.post(f"{api}/queues", json={"name": "audit-log"}, timeout=10).raise_for_status()
    requests.post(f"{api}/queues/default/audit-log/messages",
                  json={"messages": [{"body": f"user {i} signed in"} for i in range(8)]}, timeout=10).raise_for_status()


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "images" / "console.png"
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        sys.exit("no chromium on PATH (apt-get install chromium) and CHROMIUM is not set")
    with tempfile.TemporaryDirectory() as tmp:
        server = VeilServer(Path(tmp) / "data").start()
        try:
            fill(server)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                out.parent.mkdir(parents=True, exist_ok=True)
                phone = out.with_name(f"{out.stem}-phone{out.suffix}")
                for path, viewport in ((out, {"width": 1360, "height": 940}), (phone, {"width": 375, "height": 812})):
                    page = browser.new_page(viewport=viewport)
                    page.goto(server.admin_endpoint + "/")
                    expect(page.get_by_test_id("queue-row")).to_have_count(6)
                    page.locator('[data-testid="queue-row"][data-queue="orders-dlq"]').get_by_role("button").click()
                    expect(page.get_by_test_id("message-row")).to_have_count(3)
                    expect(page.get_by_test_id("redrive-open")).to_be_visible()
                    time.sleep(2.5)  # one more poll, so the status line is fresh
                    page.screenshot(path=str(path), full_page=True)
                    page.close()
                # A message delivered often: its history dialog with every delivery and its Close button.
                page = browser.new_page(viewport={"width": 1360, "height": 700})
                page.goto(server.admin_endpoint + "/")
                page.locator('[data-testid="queue-row"][data-queue="often"]').get_by_role("button").click()
                page.get_by_test_id("message-history").first.click()
                expect(page.get_by_test_id("history-table")).to_be_visible()
                page.screenshot(path=str(out.with_name(f"{out.stem}-history{out.suffix}")))
                browser.close()
        finally:
            server.stop()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
