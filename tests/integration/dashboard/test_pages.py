"""The dashboard in headless Chromium against the shipped local cluster (`zbus up`, every
service, the sparkworker included, with an admin token): each page renders live figures,
the actions work from the page, a refused action says why, and a screenshot of each page
is saved (see tests/support/browser.py for where)."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.support.browser import ARGS, VIEWPORT, chromium, screenshot_dir
from tests.support.local_cluster import LocalCluster, local_cluster
from tests.support.waiting import UNIT, wait_until

TOKEN = "dashboard-e2e-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SERVICES = ("broker", "eventbus", "sparkworker", "worker")
MS = 1000 * UNIT  # Playwright counts in milliseconds


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    # A short, neutral directory: its paths show on the pages (and in the screenshots).
    with (
        tempfile.TemporaryDirectory(prefix="zbus-") as where,
        local_cluster(
            Path(where),
            env={"catalog": {"ZBUS_HISTORY_INTERVAL": "1"}},
            launcher_env={"ZBUS_ADMIN_TOKEN": TOKEN},
        ) as running,
    ):
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium(), args=list(ARGS))
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser, cluster: LocalCluster) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    context.set_default_timeout(30 * MS)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()


def catalog_api(cluster: LocalCluster, path: str, **kwargs: Any) -> Any:
    method = "POST" if "json" in kwargs else "GET"
    reply = httpx.request(method, f"{cluster.url('catalog')}{path}", timeout=10, **kwargs)
    assert reply.status_code < 300, reply.text
    return reply.json()


def open_page(page: Page, cluster: LocalCluster, name: str, token: str | None = None) -> None:
    """Go to one page of the dashboard and wait for its first refresh to end."""
    page.goto(f"{cluster.url('catalog')}/dashboard#{name}")
    if token is not None:
        page.fill("#admin-token", token)
        page.click("#token-form button")
        expect(page.locator("#token-state")).to_have_text("token set" if token else "no token")
    expect(page.locator("body")).to_have_attribute("data-refreshed", name)


def screenshot(page: Page, name: str) -> None:
    page.locator("header").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir() / f"dashboard-{name}.png"))


def action_done(page: Page, text: str | re.Pattern[str]) -> None:
    status = page.locator("#action-status")
    expect(status).to_have_attribute("data-outcome", "ok")
    expect(status).to_contain_text(text)


# ----------------------------------------------------------------- pages


def test_overview_shows_every_service_and_charts_of_the_cluster(
    page: Page, cluster: LocalCluster
) -> None:
    for i in range(20):
        event = {"topic": f"/overview/t{i % 4}", "data": {"i": i}}
        catalog_api(cluster, "/api/v1/proxy/eventbus/api/v1/events", json=event, headers=AUTH)
    open_page(page, cluster, "overview")

    rows = page.locator("#services-body tr")
    expect(rows).to_have_count(len(SERVICES))
    for name in SERVICES:
        row = page.locator(f'tr[data-service="{name}"]')
        expect(row).to_have_attribute("data-state", "active")
        live = row.locator('td[data-field="live"]')
        expect(live).to_have_attribute("data-ready", "true")
        expect(live).to_contain_text(re.compile(r"v\d+\.\d+\.\d+ · up .+ready"))
        expect(live.locator("[data-restarts]")).to_have_text(" · 0 restarts")  # `zbus up`'s
        expect(row.locator("a")).to_have_attribute("href", re.compile(r"^http://127\.0\.0\.1:"))
    expect(page.locator("#catalog-summary")).to_have_attribute("data-ready", "true")

    # The charts fill from the catalog's samples, without a reload of the page.
    def sampled_the_events() -> bool:
        series = catalog_api(cluster, "/api/v1/history")["points"]["events_per_s"]
        return any(isinstance(v, float) and v > 0 for v in series)

    wait_until(sampled_the_events, 30, "a sample with the events published")
    for chart in ("#chart-events", "#chart-jobs", "#chart-errors"):
        expect(page.locator(chart)).to_have_attribute("data-points", re.compile(r"^([2-9]|\d\d+)$"))
        expect(page.locator(f"{chart} path.line").first).to_be_attached()
    expect(page.locator("#chart-events-last")).to_have_text(re.compile(r"/s$"))
    expect(page.locator('dd[data-figure="heartbeat-rate"]')).to_have_text(re.compile(r"/s$"))
    expect(page.locator('dd[data-figure="heartbeats"]')).to_have_text(re.compile(r"^\d+ / \d+$"))
    expect(page.locator('dd[data-figure="beacon"]')).to_contain_text("sent")
    expect(page.locator("#error-banner")).to_be_hidden()
    screenshot(page, "overview")


def test_the_bus_page_publishes_tails_and_lists_topics(page: Page, cluster: LocalCluster) -> None:
    open_page(page, cluster, "bus", token=TOKEN)
    page.fill("#publish-topic", "/e2e/bus/hello")
    page.fill("#publish-data", '{"celsius": 21.5}')
    page.click("#publish-form button")
    action_done(page, re.compile(r"published /e2e/bus/hello as sequence \d+"))

    # The live tail shows it; the topics under a prefix show its count and time.
    tail = page.locator('#tail-body tr[data-topic="/e2e/bus/hello"]')
    expect(tail).to_have_count(1)
    expect(tail).to_contain_text('{"celsius":21.5}')
    page.fill("#tail-prefix", "/e2e/")
    expect(page.locator("#tail-body tr")).to_have_count(1)
    page.fill("#topic-prefix", "/e2e/")
    topic = page.locator('#topics-body tr[data-topic="/e2e/bus/hello"]')
    expect(page.locator("#topics-body tr")).to_have_count(1)
    expect(topic.locator('td[data-field="count"]')).to_have_text("1")
    expect(topic.locator('td[data-field="rate"]')).to_have_text(re.compile(r"/s$"))
    expect(topic).to_contain_text(re.compile(r"\d{4}-\d\d-\d\dT"))

    expect(page.locator('dd[data-figure="sequence"]')).to_have_text(re.compile(r"^\d[\d,]*$"))
    expect(page.locator('#doors-body tr[data-door="spec"]')).to_have_count(1)
    expect(page.locator('#doors-body tr[data-door="mc0"]')).to_have_count(1)
    expect(page.locator('dd[data-figure="rejected"]')).to_have_text(re.compile(r"^\d+$"))
    page.fill("#topic-prefix", "")
    page.fill("#tail-prefix", "")
    expect(page.locator("#topics-body tr")).not_to_have_count(1)  # every topic again
    expect(page.locator("#tail-body tr")).not_to_have_count(1)
    screenshot(page, "bus")


def test_a_refused_action_says_why(page: Page, cluster: LocalCluster) -> None:
    open_page(page, cluster, "broker", token="")
    page.fill("#submit-callable", "echo")
    page.click("#submit-form button")
    status = page.locator("#action-status")
    expect(status).to_have_attribute("data-outcome", "refused")
    expect(status).to_contain_text("HTTP 401: a valid bearer token is required")
    expect(status).to_contain_text("enter it at the top of the page")

    page.fill("#admin-token", "not-the-token")
    page.click("#token-form button")
    page.click("#submit-form button")
    expect(status).to_contain_text("the admin token entered is not the one the cluster has")


def test_the_broker_page_submits_cancels_retries_and_purges(
    page: Page, cluster: LocalCluster
) -> None:
    open_page(page, cluster, "broker", token=TOKEN)
    jobs = page.locator("#jobs-body")

    # Submit a job that waits an hour, then cancel it.
    page.fill("#submit-queue", "parked")
    page.fill("#submit-callable", "echo")
    page.fill("#submit-args", '["hello"]')
    page.fill("#submit-delay", "3600")
    page.click("#submit-form button")
    action_done(page, re.compile(r"submitted job \S+ to parked \(queued\)"))
    parked = jobs.locator("tr[data-state=queued]").filter(has_text="parked")
    expect(parked).to_have_count(1)
    job_id = parked.get_attribute("data-job")
    parked.locator("button[data-action=cancel]").click()
    action_done(page, f"cancel {job_id}: done")
    expect(jobs.locator(f'tr[data-job="{job_id}"]')).to_have_attribute("data-state", "cancelled")

    # A job that fails, then retried from the page: the worker runs it a second time.
    def failed_runs() -> int:
        worker = catalog_api(cluster, "/api/v1/proxy/worker/api/v1/worker")
        return int(worker["jobs_failed"])

    before = failed_runs()
    page.fill("#submit-queue", "default")
    page.fill("#submit-callable", "fail")
    page.fill("#submit-args", '["on purpose"]')
    page.fill("#submit-delay", "")
    page.fill("#submit-retries", "0")
    page.click("#submit-form button")
    action_done(page, "submitted job")
    failed = jobs.locator("tr[data-state=failed]").filter(has_text="on purpose")
    expect(failed).to_have_count(1)
    failed_id = failed.get_attribute("data-job")
    assert failed_runs() == before + 1
    failed.locator("button[data-action=retry]").click()
    action_done(page, f"retry {failed_id}: done")
    wait_until(lambda: failed_runs() == before + 2, 30, "the retried job's second run")
    expect(jobs.locator(f'tr[data-job="{failed_id}"]')).to_have_attribute("data-state", "failed")

    # Purge a queue of waiting jobs.
    for i in range(3):
        job = {"queue": "purgeme", "callable": "echo", "args": [i], "delay": 3600}
        catalog_api(cluster, "/api/v1/proxy/broker/api/v1/jobs", json=job, headers=AUTH)
    queue = page.locator('#queues-body tr[data-queue="purgeme"]')
    expect(queue.locator('td[data-field="queued"]')).to_have_text("3")
    queue.locator("button[data-action=purge]").click()
    action_done(page, "purge purgeme: done")
    expect(queue.locator('td[data-field="queued"]')).to_have_text("0")
    expect(queue.locator('td[data-field="cancelled"]')).to_have_text("3")

    # Filters and live figures: the states, the workers and the queues' rates.
    page.select_option("#jobs-state", "cancelled")
    expect(jobs.locator("tr")).to_have_count(4)
    expect(jobs.locator("tr[data-state=cancelled]")).to_have_count(4)
    page.select_option("#jobs-queue", "purgeme")
    expect(jobs.locator("tr")).to_have_count(3)
    page.select_option("#jobs-state", "")
    page.select_option("#jobs-queue", "")
    expect(jobs.locator("tr")).to_have_count(5)  # parked, fail, and purgeme's three
    worker = page.locator('#workers-body tr[data-worker="worker"]')
    expect(worker.locator('td[data-field="concurrency"]')).to_have_text("4")
    expect(worker.locator('td[data-field="done"]')).to_contain_text("failed)")
    expect(page.locator('#workers-body tr[data-worker="sparkworker"]')).to_have_count(1)
    expect(page.locator('#queues-body tr[data-queue="default"] td[data-field="in"]')).to_have_text(
        re.compile(r"/s$")
    )
    screenshot(page, "broker")


def test_the_pipeline_page_runs_a_built_in_job(page: Page, cluster: LocalCluster) -> None:
    open_page(page, cluster, "pipeline", token=TOKEN)
    expect(page.locator('dd[data-figure="session"]')).to_contain_text("up (local[2]")
    page.select_option("#run-job", "topic-stats")
    page.fill("#run-params", "{}")
    page.click("#run-form button")
    action_done(page, re.compile(r"submitted topic-stats as job \S+ on queue spark"))
    row = page.locator("#spark-jobs-body tr[data-job=topic-stats]").first
    expect(row).to_have_attribute("data-state", "succeeded", timeout=120 * MS)
    expect(row.locator("progress")).to_have_attribute("value", "100")
    expect(row.locator('td[data-field="output"]')).to_contain_text("topic-stats")
    expect(row.locator('td[data-field="result"]')).to_contain_text(re.compile(r'"events":\d+'))
    expect(row.locator('td[data-field="seconds"]')).to_have_text(re.compile(r"\d"))
    expect(page.locator('dd[data-figure="done"]')).to_have_text(re.compile(r"^[1-9]\d* / 0$"))
    screenshot(page, "pipeline")


def test_the_logs_page_tails_the_cluster_with_filters(page: Page, cluster: LocalCluster) -> None:
    open_page(page, cluster, "logs")
    records = page.locator("#logs-body tr")
    expect(records.first).to_be_visible()
    stamps = [r.get_attribute("data-log-service") for r in records.all()]
    assert len(set(stamps)) >= 3, stamps  # the whole cluster's
    times = [r.locator('td[data-field="ts"]').inner_text() for r in records.all()]
    assert times == sorted(times)  # in time order, the newest at the bottom
    page.select_option("#log-service", "broker")
    expect(records.first).to_have_attribute("data-log-service", "broker")
    expect(page.locator('#logs-body tr:not([data-log-service="broker"])')).to_have_count(0)
    assert "service=broker" in page.url
    page.select_option("#log-service", "")
    page.select_option("#log-level", "warning")
    expect(page.locator('#logs-body tr[data-log-level="info"]')).to_have_count(0)
    expect(records.first).to_have_attribute("data-log-level", "warning")
    # (The picture with the warnings: the other records carry this checkout's paths.)
    screenshot(page, "logs")
    page.select_option("#log-level", "")
    expect(page.locator('#logs-body tr[data-log-level="info"]').first).to_be_visible()


def test_the_screenshots_are_small_pictures(cluster: LocalCluster) -> None:
    for name in ("overview", "bus", "broker", "pipeline", "logs"):
        path: Path = screenshot_dir() / f"dashboard-{name}.png"
        if path.exists():
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert path.stat().st_size < 400 * 1024
