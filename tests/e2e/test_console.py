"""The web console (README "Web console") driven in a real browser: Playwright on the system Chromium.

The console is a page over the admin API, so these tests make state with the real clients (boto3, the Azure
SDK, the admin API for KubeMQ's namespace) and check what the page shows and does: the live queue list, a peek
that receives nothing, send and delete, purge behind a typed confirmation, and a DLQ redrive whose progress
bar completes. Playwright's own browser download is not used: CHROMIUM (or `chromium` on PATH) is launched
with --no-sandbox, as the suite runs as root. Without Playwright or Chromium the module skips, saying why.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest
import requests

from helpers import channel_name, counts, queue_attrs

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (tests/requirements.txt)")
expect = sync_api.expect


def chromium_path() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    exe = chromium_path()
    if not exe:
        pytest.skip("no system Chromium (apt-get install chromium; ./scripts/test does it as root)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    # A CSP violation or a missing asset shows as a console error: the page must load cleanly.
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.console_errors = errors
    pg.goto(server.admin_endpoint + "/")
    expect(pg.get_by_test_id("status")).to_contain_text("live")
    yield pg
    context.close()
    assert not errors, f"the console logged errors: {errors}"


def forgive_http_error(page, status: int) -> None:
    """Drops the browser's log line for an API answer of `status` that the test provoked on purpose."""
    page.console_errors[:] = [e for e in page.console_errors if f"status of {status} " not in e]


def admin(server, method: str, path: str, **kwargs) -> requests.Response:
    return requests.request(method, f"{server.admin_endpoint}/api/v1{path}", timeout=20, **kwargs)


def row(page, name: str, namespace: str = "default"):
    return page.locator(f'[data-testid="queue-row"][data-namespace="{namespace}"][data-queue="{name}"]')


def open_queue(page, name: str, namespace: str = "default"):
    row(page, name, namespace).get_by_role("button").click()
    expect(page.get_by_test_id("detail-name")).to_have_text(name)


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_assets_are_embedded_with_types_and_a_self_only_policy(server):
    for path, wanted in [("/", "text/html"), ("/assets/console.js", "text/javascript"),
                         ("/assets/console.css", "text/css")]:
        r = requests.get(server.admin_endpoint + path, timeout=10)
        assert r.status_code == 200, path
        assert r.headers["Content-Type"].startswith(wanted), (path, r.headers["Content-Type"])
        csp = r.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp


def test_list_shows_every_protocol_with_counts_and_updates_live(page, server, sqs, new_queue, azure_service,
                                                                  azure_queue_name, queue_name, kmq):
    from kubemq.queues import QueueMessage

    sqs_url = new_queue("sqs")
    sqs_name = sqs_url.rsplit("/", 1)[1]
    for i in range(3):
        sqs.send_message(QueueUrl=sqs_url, MessageBody=f"m{i}")
    sqs.receive_message(QueueUrl=sqs_url, MaxNumberOfMessages=1, VisibilityTimeout=300)
    sqs.send_message(QueueUrl=sqs_url, MessageBody="later", DelaySeconds=300)
    fifo_url = new_queue("f.fifo", FifoQueue="true", ContentBasedDeduplication="true")
    sqs.send_message(QueueUrl=fifo_url, MessageBody="x", MessageGroupId="g")

    azure = azure_service.get_queue_client(azure_queue_name)
    azure.create_queue()
    azure.send_message("hello")
    azure.send_message("world")

    # A queue in KubeMQ's namespace made through the admin API (KubeMQ channels live in `default` too).
    kubemq_name = f"{queue_name}-kmq"
    r = admin(server, "POST", "/queues", json={"name": kubemq_name})
    assert r.status_code == 201, r.text
    admin(server, "POST", f"/queues/default/{kubemq_name}/messages", json={"messages": [{"body": "k"}]})

    # And a channel a KubeMQ client made by sending to it.
    channel = channel_name("console")
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"c0"))
    kmq.send_queue_message(QueueMessage(channel=channel, body=b"c1"))

    sqs_row = row(page, sqs_name)
    expect(sqs_row.get_by_test_id("queue-visible")).to_have_text("2")
    expect(sqs_row.get_by_test_id("queue-inflight")).to_have_text("1")
    expect(sqs_row.get_by_test_id("queue-delayed")).to_have_text("1")
    expect(sqs_row.get_by_test_id("queue-created-by")).to_have_text("sqs")
    expect(sqs_row.get_by_test_id("queue-type")).to_have_text("standard")
    expect(sqs_row.locator("svg")).to_have_count(1)

    fifo_row = row(page, fifo_url.rsplit("/", 1)[1])
    expect(fifo_row.get_by_test_id("queue-type")).to_have_text("fifo")
    expect(fifo_row.get_by_test_id("queue-visible")).to_have_text("1")

    azure_row = row(page, azure_queue_name)
    expect(azure_row.get_by_test_id("queue-created-by")).to_have_text("azure")
    expect(azure_row.get_by_test_id("queue-visible")).to_have_text("2")

    kubemq_row = row(page, kubemq_name)
    expect(kubemq_row.get_by_test_id("queue-created-by")).to_have_text("admin")
    expect(kubemq_row.get_by_test_id("queue-visible")).to_have_text("1")

    channel_row = row(page, channel)
    expect(channel_row.get_by_test_id("queue-created-by")).to_have_text("kubemq")
    expect(channel_row.get_by_test_id("queue-visible")).to_have_text("2")

    # Live: a send through SQS shows without a reload, within a couple of 2-second polls.
    sqs.send_message(QueueUrl=sqs_url, MessageBody="one more")
    expect(sqs_row.get_by_test_id("queue-visible")).to_have_text("3", timeout=8000)


def test_peek_shows_bodies_and_receives_nothing(page, server, sqs, queue_url, queue_name):
    sqs.send_message(QueueUrl=queue_url, MessageBody="first <b>body</b>",
                     MessageAttributes={"kind": {"DataType": "String", "StringValue": "demo"}})
    sqs.send_message(QueueUrl=queue_url, MessageBody="second")
    open_queue(page, queue_name)

    rows = page.get_by_test_id("message-row")
    expect(rows).to_have_count(2)
    # Rendered as text: the markup in the body is shown, not interpreted.
    expect(rows.nth(0).get_by_test_id("message-body")).to_contain_text("first <b>body</b>")
    expect(rows.nth(0).locator("b")).to_have_count(0)
    expect(rows.nth(0).get_by_test_id("message-attributes")).to_contain_text("kind (String) = demo")
    expect(rows.nth(1).get_by_test_id("message-body")).to_contain_text("second")
    expect(rows.nth(0).get_by_test_id("message-receives")).to_have_text("0")
    expect(rows.nth(0).get_by_test_id("message-state")).to_have_text("visible")

    page.get_by_test_id("browse-state").select_option("all")
    page.get_by_test_id("browse-refresh").click()
    expect(rows).to_have_count(2)

    # Nothing was received: both still visible, and SQS hands them out as first deliveries.
    assert counts(sqs, queue_url) == (2, 0, 0)
    got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, AttributeNames=["ApproximateReceiveCount"],
                              VisibilityTimeout=30)["Messages"]
    assert sorted(m["Body"] for m in got) == ["first <b>body</b>", "second"]
    assert all(m["Attributes"]["ApproximateReceiveCount"] == "1" for m in got)


def test_binary_body_shows_as_base64(page, server, queue_name):
    r = admin(server, "POST", "/queues", json={"name": queue_name})
    assert r.status_code == 201, r.text
    r = admin(server, "POST", f"/queues/default/{queue_name}/messages", json={"messages": [{"body_base64": "/wD+"}]})
    assert r.status_code == 200, r.text
    open_queue(page, queue_name)
    expect(page.get_by_test_id("message-body").locator("pre.b64")).to_have_text("/wD+")


def test_send_and_delete_from_the_console(page, sqs, queue_url, queue_name):
    open_queue(page, queue_name)
    expect(page.get_by_test_id("no-messages")).to_be_visible()

    page.get_by_test_id("send-open").click()
    page.get_by_test_id("send-body").fill("sent from the console")
    page.get_by_test_id("send-submit").click()
    expect(page.get_by_test_id("send-dialog")).to_be_hidden()
    rows = page.get_by_test_id("message-row")
    expect(rows).to_have_count(1)
    expect(rows.get_by_test_id("message-body")).to_contain_text("sent from the console")
    assert counts(sqs, queue_url) == (1, 0, 0)

    page.once("dialog", lambda d: d.accept())
    rows.get_by_test_id("message-delete").click()
    expect(rows).to_have_count(0)
    assert counts(sqs, queue_url) == (0, 0, 0)


def test_history_says_so_when_there_is_none(page, server, sqs, queue_url, queue_name):
    sqs.send_message(QueueUrl=queue_url, MessageBody="h")
    open_queue(page, queue_name)
    page.get_by_test_id("message-history").click()
    dialog = page.get_by_test_id("history-dialog")
    expect(dialog).to_be_visible()
    # The history endpoint is optional: whether it answers or not, the dialog settles on something readable.
    expect(dialog.get_by_test_id("history-empty").or_(dialog.get_by_test_id("history-table"))).to_be_visible()
    page.get_by_test_id("history-close").click()
    expect(dialog).to_be_hidden()
    # A server without the history endpoint answers 404, which the browser logs.
    forgive_http_error(page, 404)


def total(page, label: str):
    """The value of one total in the open queue's Totals card."""
    return page.get_by_test_id("detail-totals").locator(f"dt:text-is('{label}') + dd")


def test_purge_needs_the_queue_name(page, sqs, queue_url, queue_name):
    for i in range(3):
        sqs.send_message(QueueUrl=queue_url, MessageBody=f"p{i}")
    open_queue(page, queue_name)
    expect(page.get_by_test_id("message-row")).to_have_count(3)

    page.get_by_test_id("purge-open").click()
    dialog = page.get_by_test_id("purge-dialog")
    expect(dialog).to_be_visible()
    page.get_by_test_id("purge-confirm").fill(queue_name + "-wrong")
    page.get_by_test_id("purge-submit").click()
    expect(page.get_by_test_id("purge-error")).to_contain_text("repeat the queue's name")
    expect(dialog).to_be_visible()
    assert counts(sqs, queue_url) == (3, 0, 0)
    forgive_http_error(page, 400)

    page.get_by_test_id("purge-confirm").fill(queue_name)
    page.get_by_test_id("purge-submit").click()
    expect(dialog).to_be_hidden()
    expect(page.get_by_test_id("message-row")).to_have_count(0)
    assert counts(sqs, queue_url) == (0, 0, 0)
    expect(row(page, queue_name).get_by_test_id("queue-visible")).to_have_text("0", timeout=8000)
    # A purge is counted as purged, not as deleted (docs/semantics.md §9, "Totals").
    expect(total(page, "Purged")).to_have_text("3", timeout=8000)
    expect(total(page, "Deleted")).to_have_text("0")


def test_redrive_a_dead_letter_queue_with_progress(page, server, sqs, new_queue, queue_name):
    dlq_url = new_queue("dlq")
    dlq_arn = queue_attrs(sqs, dlq_url, "QueueArn")["QueueArn"]
    src_url = new_queue("src", RedrivePolicy=f'{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}')
    bodies = [f"poison-{i}" for i in range(4)]
    for body in bodies:
        sqs.send_message(QueueUrl=src_url, MessageBody=body)
    # The first receive counts 1; the second finds the count at the maximum and dead-letters instead.
    for _ in range(2):
        for _ in range(3):
            sqs.receive_message(QueueUrl=src_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    wait_for(lambda: counts(sqs, dlq_url)[0] == 4, what="4 messages in the DLQ")
    assert counts(sqs, src_url) == (0, 0, 0)

    dlq_name = f"{queue_name}-dlq"
    src_name = f"{queue_name}-src"
    open_queue(page, dlq_name)
    expect(page.get_by_test_id("message-row")).to_have_count(4)
    expect(page.get_by_test_id("detail-dead-letter")).to_contain_text(src_name)
    expect(page.get_by_test_id("message-body").first).to_contain_text(f"dead-lettered from default/{src_name}")
    open_button = page.get_by_test_id("redrive-open")
    expect(open_button).to_be_visible()

    open_button.click()
    expect(page.get_by_test_id("redrive-dialog")).to_be_visible()
    page.get_by_test_id("redrive-submit").click()
    progress = page.get_by_test_id("redrive-progress")
    expect(progress).to_be_visible()
    expect(progress).to_have_attribute("data-status", "completed", timeout=15000)
    bar = page.get_by_test_id("redrive-bar")
    expect(bar).to_have_attribute("max", "4")
    expect(bar).to_have_js_property("value", 4)
    expect(page.get_by_test_id("redrive-count")).to_have_text("4 / 4")

    assert counts(sqs, dlq_url) == (0, 0, 0)
    assert counts(sqs, src_url) == (4, 0, 0)
    # The dead letters arrived as the dead-letter queue's sends and left it as moves, not deletes.
    expect(total(page, "Moved out")).to_have_text("4", timeout=8000)
    expect(total(page, "Sent")).to_have_text("4")
    expect(total(page, "Deleted")).to_have_text("0")
    got = []
    while len(got) < 4:
        got += [m["Body"] for m in sqs.receive_message(QueueUrl=src_url, MaxNumberOfMessages=10).get("Messages", [])]
    assert sorted(got) == bodies


def test_redrive_is_not_offered_for_an_ordinary_queue(page, sqs, queue_url, queue_name):
    sqs.send_message(QueueUrl=queue_url, MessageBody="plain")
    open_queue(page, queue_name)
    expect(page.get_by_test_id("message-row")).to_have_count(1)
    expect(page.get_by_test_id("redrive-open")).to_be_hidden()


# ----- a server with an admin token -----


def test_the_console_asks_for_the_admin_token_then_works(browser, make_server):
    tokened = make_server(extra_args=["--admin-token", "console-token"])
    name = f"behind-token-{int(time.time() * 1000)}"
    made = requests.post(f"{tokened.admin_endpoint}/api/v1/queues", json={"name": name}, timeout=20,
                         headers={"Authorization": "Bearer console-token"})
    assert made.status_code in (200, 201), made.text
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" and "status of 401 " not in m.text
          else None)
    requests_seen: list[str] = []
    pg.on("request", lambda r: requests_seen.append(r.url))
    try:
        pg.goto(tokened.admin_endpoint + "/")
        # The API refuses without the token: the page asks for it ...
        expect(pg.get_by_test_id("token-dialog")).to_be_visible()
        pg.get_by_test_id("token-input").fill("console-token")
        pg.get_by_test_id("token-submit").click()
        # ... then works with it, kept in this tab's sessionStorage and never put in a URL.
        expect(pg.get_by_test_id("status")).to_contain_text("live")
        expect(row(pg, name)).to_be_visible()
        assert pg.evaluate("sessionStorage.getItem('veil-admin-token')") == "console-token"
        assert not [u for u in requests_seen if "console-token" in u]
        # The Metrics link sends the token too: /metrics shows instead of a 401.
        pg.get_by_test_id("metrics-link").click()
        expect(pg.get_by_test_id("metrics-text")).to_contain_text("veil_requests_total")
        expect(pg.get_by_test_id("metrics-text")).to_contain_text("veil_build_info")
        pg.get_by_test_id("metrics-close").click()
        expect(pg.get_by_test_id("metrics-dialog")).to_be_hidden()
    finally:
        context.close()
    assert not errors, f"the console logged errors: {errors}"


def test_a_favicon_answers_where_browsers_look_for_one(server):
    for path in ("/favicon.ico", "/assets/favicon.svg"):
        resp = requests.get(server.admin_endpoint + path, timeout=10)
        assert resp.status_code == 200 and resp.headers["content-type"] == "image/svg+xml", (path, resp.status_code)


def test_a_long_delivery_history_keeps_its_ended_column_and_close_button_in_view(browser, server, sqs, queue_url,
                                                                                  queue_name):
    sqs.send_message(QueueUrl=queue_url, MessageBody="received again and again")
    for _ in range(8):
        got = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=0, WaitTimeSeconds=1).get("Messages", [])
        assert got, "the message came back each time"
    for width, height in ((1400, 700), (390, 700)):
        context = browser.new_context(viewport={"width": width, "height": height})
        pg = context.new_page()
        try:
            pg.goto(server.admin_endpoint + "/")
            expect(pg.get_by_test_id("status")).to_contain_text("live")
            open_queue(pg, queue_name)
            pg.get_by_test_id("message-history").first.click()
            table = pg.get_by_test_id("history-table")
            expect(table).to_be_visible()
            assert table.locator("tbody tr").count() == 8
            close = pg.get_by_test_id("history-close")
            box = close.bounding_box()
            assert box and box["y"] + box["height"] <= height and box["x"] + box["width"] <= width, (width, box)
            ended = table.locator("th", has_text="Ended")
            ended.scroll_into_view_if_needed()
            expect(ended).to_be_in_viewport()
            close.click()
            expect(pg.get_by_test_id("history-dialog")).to_be_hidden()
        finally:
            context.close()


def test_on_a_phone_the_page_never_scrolls_sideways(browser, server, sqs, queue_url, queue_name):
    sqs.send_message(QueueUrl=queue_url, MessageBody="averyveryverylongwordwithoutanyspaces" * 3)
    context = browser.new_context(viewport={"width": 375, "height": 740})
    pg = context.new_page()
    try:
        pg.goto(server.admin_endpoint + "/")
        expect(pg.get_by_test_id("status")).to_contain_text("live")
        open_queue(pg, queue_name)
        expect(pg.get_by_test_id("message-rows").locator("tr")).to_have_count(1)
        overflow = pg.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than the phone"
    finally:
        context.close()


def test_the_chart_keeps_its_time_labels_off_the_plot_and_can_scale_each_line_alone(page, sqs, queue_url,
                                                                                    queue_name):
    for i in range(3):
        sqs.send_message(QueueUrl=queue_url, MessageBody=f"c{i}")
    open_queue(page, queue_name)
    chart = page.get_by_test_id("detail-chart").locator("svg")
    expect(chart).to_be_visible()
    axis_y = float(chart.locator("line.axis").get_attribute("y1"))
    for label in chart.locator("text").all():
        if label.text_content() in ("now",) or label.text_content().startswith("−"):
            assert float(label.get_attribute("y")) > axis_y, "a time label sits on the plot"
    assert "own scale" not in chart.locator("title").text_content()
    page.get_by_test_id("chart-separate").check()
    expect(page.get_by_test_id("detail-chart").locator("svg title")).to_contain_text("each line on its own scale")


def test_the_url_follows_the_selected_queue_so_a_reload_keeps_it(page, server, queue_url, queue_name):
    open_queue(page, queue_name)
    assert page.evaluate("location.hash") == f"#/queues/default/{queue_name}"
    page.reload()
    expect(page.get_by_test_id("detail-name")).to_have_text(queue_name)
    page.get_by_test_id("detail-close").click()
    expect(page.get_by_test_id("queue-detail")).to_be_hidden()
    assert page.evaluate("location.hash") == ""


def test_queue_columns_sort_by_a_header_click(page, sqs, new_queue, queue_name):
    for suffix, count in (("a", 2), ("b", 5), ("c", 1)):
        url = new_queue(suffix)
        for i in range(count):
            sqs.send_message(QueueUrl=url, MessageBody=f"{suffix}{i}")
    page.get_by_test_id("queue-filter").fill(queue_name)

    def order():
        return [n.split("-")[-1] for n in page.locator('[data-testid="queue-row"]:visible').evaluate_all(
            "rows => rows.map(r => r.dataset.queue)")]

    wait_for(lambda: sorted(order()) == ["a", "b", "c"], what="the three queues listed")
    header = page.locator('th[data-sort="visible"]')
    header.get_by_role("button").click()
    wait_for(lambda: order() == ["b", "a", "c"], what="largest visible first")
    expect(header).to_have_attribute("aria-sort", "descending")
    header.get_by_role("button").click()
    wait_for(lambda: order() == ["c", "a", "b"], what="smallest visible first")
    expect(header).to_have_attribute("aria-sort", "ascending")


def test_create_edit_and_delete_a_queue_from_the_console(page, server, queue_name):
    page.get_by_test_id("create-open").click()
    page.get_by_test_id("create-name").fill(queue_name)
    page.get_by_test_id("create-visibility").fill("45")
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("detail-name")).to_have_text(queue_name)
    assert admin(server, "GET", f"/queues/default/{queue_name}").json()["settings"]["visibility_timeout_s"] == 45

    page.get_by_test_id("settings-open").click()
    expect(page.get_by_test_id("settings-visibility")).to_have_value("45")
    page.get_by_test_id("settings-visibility").fill("60")
    page.get_by_test_id("settings-submit").click()
    expect(page.get_by_test_id("settings-dialog")).to_be_hidden()
    expect(page.get_by_test_id("detail-settings")).to_contain_text("60 s")

    page.get_by_test_id("delete-open").click()
    page.get_by_test_id("delete-confirm").fill("not-the-name")
    page.get_by_test_id("delete-submit").click()
    expect(page.get_by_test_id("delete-error")).to_contain_text("type the queue's name")
    assert admin(server, "GET", f"/queues/default/{queue_name}").status_code == 200
    page.get_by_test_id("delete-confirm").fill(queue_name)
    page.get_by_test_id("delete-submit").click()
    expect(page.get_by_test_id("queue-detail")).to_be_hidden()
    assert admin(server, "GET", f"/queues/default/{queue_name}").status_code == 404
    expect(row(page, queue_name)).to_have_count(0)


def test_send_with_attributes_and_a_delay(page, server, queue_url, queue_name):
    open_queue(page, queue_name)
    page.get_by_test_id("send-open").click()
    page.get_by_test_id("send-body").fill("later")
    page.get_by_test_id("send-attributes").fill("kind=String:order\nn=Number:3")
    page.get_by_test_id("send-delay").fill("30")
    page.get_by_test_id("send-submit").click()
    expect(page.get_by_test_id("send-dialog")).to_be_hidden()
    [stored] = admin(server, "GET", f"/queues/default/{queue_name}/messages", params={"state": "all"}).json()["messages"]
    assert stored["state"] == "delayed"
    assert stored["attributes"]["kind"]["string_value"] == "order"
    assert (stored["attributes"]["n"]["data_type"], stored["attributes"]["n"]["string_value"]) == ("Number", "3")
    # A malformed attribute line is refused in the dialog, nothing sent.
    page.get_by_test_id("send-open").click()
    page.get_by_test_id("send-body").fill("x")
    page.get_by_test_id("send-attributes").fill("just words")
    page.get_by_test_id("send-submit").click()
    expect(page.get_by_test_id("send-error")).to_contain_text("name=Type:value")
    page.get_by_test_id("send-cancel").click()
    assert len(admin(server, "GET", f"/queues/default/{queue_name}/messages", params={"state": "all"}).json()["messages"]) == 1


def test_each_queue_shows_its_rates_beside_its_counts(page, sqs, queue_url, queue_name):
    stop = time.monotonic() + 6
    sent = 0
    expect(row(page, queue_name)).to_be_visible()
    while time.monotonic() < stop:
        sqs.send_message(QueueUrl=queue_url, MessageBody="tick")
        sent += 1
        time.sleep(0.02)
        text = row(page, queue_name).get_by_test_id("queue-sent-rate").text_content()
        if text not in ("–", "0.0") and float(text) > 0:
            break
    rate = row(page, queue_name).get_by_test_id("queue-sent-rate").text_content()
    assert rate not in ("–",) and float(rate) > 0, (rate, sent)
    assert row(page, queue_name).get_by_test_id("queue-deleted-rate").text_content() == "0.0"
