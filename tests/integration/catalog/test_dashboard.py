"""The cluster dashboard, served by a real catalog: the cluster view over real admin
APIs, the page and its files, and the page as headless Chromium renders it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Page, async_playwright, expect

from tests.integration.catalog.test_log_aggregation import shipping_logger
from tests.support.browser import ARGS, VIEWPORT, chromium
from tests.support.bus import bus_on_base_port
from tests.support.catalog import running_catalog
from tests.support.echo_service import EchoService, EchoSettings
from tests.support.waiting import UNIT, async_wait_until
from zbus import dashboard
from zbus.catalog.client.node import CatalogNode
from zbus.catalog.server.service import CatalogService
from zbus.dashboard.cluster import admin_url
from zbus.runtime.logship import LogShipper

# ----------------------------------------------------------------- helpers


@asynccontextmanager
async def running_echo(
    data_dir: Path, *, with_dashboard: bool = False
) -> AsyncIterator[EchoService]:
    """A real zbus service with an admin API (optionally serving the dashboard page)."""
    service = EchoService(EchoSettings(data_dir=data_dir))
    if with_dashboard:
        dashboard.mount(service.admin_app)
    task = asyncio.create_task(service.run())

    async def started() -> bool:
        if task.done():
            task.result()
        return service.readiness()["started"]

    await async_wait_until(started, what="echo service start")
    try:
        yield service
    finally:
        service.request_stop()
        await asyncio.wait_for(task, 20 * UNIT)


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections: bound (so nobody else takes it) but
    not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def node_info(name: str, admin: str | None = None, **extra: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "name": name,
        "ip": "127.0.0.1",
        "port": 1,
        "function": "test",
        "heartbeat_interval": 0.5,
        **extra,
    }
    if admin is not None:
        info["admin"] = admin
    return info


async def get(service: CatalogService | EchoService, path: str, **params: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=service.admin_url or "") as http:
        return await http.get(path, params=params)


@dataclass
class Element:
    """Just enough of a DOM to assert on a page's structure."""

    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self) -> Iterator[Element]:
        for child in self.children:
            if isinstance(child, Element):
                yield child
                yield from child.iter()

    def all(self, tag: str | None = None, **attrs: str | None) -> list[Element]:
        """Descendants with ``tag`` and the attributes given (None: present at all);
        ``data_x`` stands for ``data-x``."""
        wanted = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [
            e
            for e in self.iter()
            if (tag is None or e.tag == tag)
            and all(k in e.attrs and (v is None or e.attrs[k] == v) for k, v in wanted.items())
        ]

    def by_id(self, id_: str) -> Element:
        found = self.all(id=id_)
        assert len(found) == 1, f"{len(found)} elements with id {id_!r}"
        return found[0]


class _TreeBuilder(HTMLParser):
    VOID = frozenset(
        {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in self.VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_html(text: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(text)
    builder.close()
    return builder.root


def visible(element: Element) -> bool:
    return "hidden" not in element.attrs


# ----------------------------------------------------------------- the cluster view


async def test_the_cluster_view_asks_every_service_its_own_admin_api(tmp_path: Path) -> None:
    async with (
        running_catalog(tmp_path / "catalog") as catalog,
        running_echo(tmp_path / "echo") as echo,
    ):
        dbp = catalog.endpoints["dbp"]
        with closed_port() as dead_port:
            live_info = node_info("svc-live", echo.admin_url, endpoints=dict(echo.endpoints))
            dead_info = node_info("svc-dead", f"http://127.0.0.1:{dead_port}")
            async with (
                CatalogNode(dbp, live_info, heartbeat_interval=0.5),
                CatalogNode(dbp, dead_info, heartbeat_interval=0.5),
                CatalogNode(dbp, node_info("svc-bare"), heartbeat_interval=0.5),
            ):
                reply = await get(catalog, "/api/v1/cluster")
                assert reply.status_code == 200, reply.text
                view = reply.json()

        assert view["catalog"]["name"] == "catalog"
        assert view["catalog"]["ready"] is True
        assert view["catalog"]["endpoints"]["dbp"] == dbp
        assert isinstance(view["time"], float)
        entries = {e["name"]: e for e in view["services"]}
        assert sorted(entries) == ["svc-bare", "svc-dead", "svc-live"]

        live = entries["svc-live"]
        assert live["state"] == "active"
        assert live["admin"] == echo.admin_url
        assert live["error"] is None
        assert live["info"]["name"] == "echo"
        assert live["info"]["endpoints"]["echo"] == echo.endpoints["echo"]
        assert live["ready"] is True
        assert live["checks"] == {"started": True}

        dead = entries["svc-dead"]
        assert dead["admin"] == f"http://127.0.0.1:{dead_port}"
        assert dead["info"] is None and dead["ready"] is None
        assert dead["error"].startswith("cannot connect")  # one cause, said once

        bare = entries["svc-bare"]
        assert bare["admin"] is None
        assert bare["info"] is None and bare["ready"] is None and bare["error"] is None


def test_admin_urls_are_taken_as_http_urls_made_reachable() -> None:
    assert admin_url({"admin": "http://127.0.0.1:8701/"}) == "http://127.0.0.1:8701"
    assert admin_url({"admin": "https://catalog.example:443"}) == "https://catalog.example:443"
    # Bound to every interface: the host is where its heartbeats come from, else its ip.
    assert admin_url({"admin": "http://0.0.0.0:8702"}, "10.1.2.3:40000") == "http://10.1.2.3:8702"
    assert admin_url({"admin": "http://0.0.0.0:8702", "ip": "10.9.9.9"}) == "http://10.9.9.9:8702"
    assert admin_url({"admin": "http://[::]:8702"}, "fd00::5:40000") == "http://[fd00::5]:8702"
    for unusable in (None, 8702, "", "file:///etc/passwd", "ftp://host/x", "http://", "http://h:x"):
        assert admin_url({"admin": unusable}) is None
    assert admin_url({}) is None


# ----------------------------------------------------------------- the page


async def test_the_page_and_its_files_are_served_with_their_types(tmp_path: Path) -> None:
    async with running_catalog(tmp_path) as catalog:
        root = await get(catalog, "/")
        assert root.is_redirect
        assert root.headers["location"] == "/dashboard"

        page = await get(catalog, "/dashboard")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert 'src="/dashboard/static/app.js"' in page.text
        assert 'href="/dashboard/static/style.css"' in page.text

        script = await get(catalog, "/dashboard/static/app.js")
        assert script.status_code == 200
        assert "javascript" in script.headers["content-type"]
        style = await get(catalog, "/dashboard/static/style.css")
        assert style.status_code == 200
        assert style.headers["content-type"].startswith("text/css")
        assert (await get(catalog, "/dashboard/static/missing.js")).status_code == 404

        # Nothing is loaded from elsewhere: the machines it runs on may have no internet.
        links = [
            e.attrs[a]
            for e in parse_html(page.text).iter()
            for a in ("src", "href")
            if a in e.attrs
        ]
        # (Links within the page, to its own views, are fragments: #bus, #broker, ...)
        fetched = [link for link in links if not link.startswith("#")]
        assert fetched and all(link.startswith("/dashboard/static/") for link in fetched)
        for script in (f for f in fetched if f.endswith(".js")):
            assert (await get(catalog, script)).status_code == 200, script
        assert "@import" not in style.text and "url(" not in style.text

        # The catalog's own routes are all still there.
        assert (await get(catalog, "/api/v1/services")).json() == {"services": []}
        assert (await get(catalog, "/healthz")).json() == {"status": "ok"}


@asynccontextmanager
async def browser_page() -> AsyncIterator[Page]:
    """A page of headless Chromium (Debian's, through Playwright)."""
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium(), args=list(ARGS))
        try:
            page = await browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
            page.set_default_timeout(30_000 * UNIT)
            yield page
        finally:
            await browser.close()


async def test_chromium_renders_services_their_state_and_the_logs(tmp_path: Path) -> None:
    async with (
        bus_on_base_port(tmp_path / "bus") as base,
        running_catalog(tmp_path / "catalog", eventbus_endpoint=base) as catalog,
        running_echo(tmp_path / "echo") as echo,
        browser_page() as page,
    ):
        url = f"{catalog.admin_url}/dashboard"

        # Nothing registered yet: the empty state, and no error.
        await page.goto(url)
        await expect(page.locator("body")).to_have_attribute("data-loaded", "true")
        await expect(page.locator("body")).to_have_attribute("data-errors", "0")
        await expect(page.locator("#services-empty")).to_have_text("no services registered")
        await expect(page.locator("#services-table")).to_be_hidden()
        await expect(page.locator("#error-banner")).to_be_hidden()
        await expect(page.locator("#catalog-summary")).to_contain_text("catalog")

        dbp = catalog.endpoints["dbp"]
        shipper = LogShipper("svc-live", base)
        with (
            closed_port() as dead_port,
            shipping_logger("dashboard.test", shipper) as logger,
        ):
            live_info = node_info("svc-live", echo.admin_url, endpoints=dict(echo.endpoints))
            dead_info = node_info("svc-dead", f"http://127.0.0.1:{dead_port}")
            async with (
                CatalogNode(dbp, live_info, heartbeat_interval=0.5),
                CatalogNode(dbp, dead_info, heartbeat_interval=0.5),
            ):
                logger.info("hello from svc-live")

                async def logged(count: int) -> bool:
                    reply = await get(catalog, "/api/v1/logs")
                    return len(reply.json()["logs"]) >= count

                # Once the first record is in, the catalog's subscription is live.
                await async_wait_until(lambda: logged(1), what="the first log record")
                logger.warning("disk <b>almost</b> full", extra={"free_bytes": 1024})
                await async_wait_until(lambda: logged(2), what="the second log record")

                # The page refreshes by itself: the services appear without a reload.
                rows = page.locator("#services-body tr")
                await expect(rows).to_have_count(2)
                await expect(page.locator("#services-table")).to_be_visible()
                for name in ("svc-dead", "svc-live"):
                    row = page.locator(f'tr[data-service="{name}"]')
                    await expect(row).to_have_attribute("data-state", "active")
                    await expect(row.locator('td[data-field="name"]')).to_have_text(name)
                    await expect(row.locator('td[data-field="function"]')).to_have_text("test")
                live = page.locator('tr[data-service="svc-live"]')
                href = await live.locator("a").first.get_attribute("href")
                assert (href or "").rstrip("/") == echo.admin_url
                live_cell = live.locator('td[data-field="live"]')
                await expect(live_cell).to_have_attribute("data-live", "ok")
                await expect(live_cell).to_have_attribute("data-ready", "true")
                await expect(live.locator('td[data-field="endpoints"]')).to_contain_text(
                    echo.endpoints["echo"]
                )
                dead_cell = page.locator('tr[data-service="svc-dead"] td[data-field="live"]')
                await expect(dead_cell).to_have_attribute("data-live", "error")
                await expect(dead_cell).to_contain_text("cannot connect")

                # The logs page: in time order, data shown as text, never as markup.
                await page.goto(f"{url}#logs")
                records = page.locator("#logs-body tr")
                await expect(records).to_have_count(2)
                assert [
                    (
                        await r.get_attribute("data-log-level"),
                        await r.get_attribute("data-log-service"),
                    )
                    for r in await records.all()
                ] == [("info", "svc-live"), ("warning", "svc-live")]
                message = records.nth(1).locator('td[data-field="msg"]')
                await expect(message).to_contain_text("disk <b>almost</b> full")
                await expect(records.nth(1)).to_contain_text("free_bytes=1024")
                assert await page.locator("#logs b").count() == 0

                # The filters start from the page's query and ask the catalog for them.
                await page.goto(f"{url}?level=warning&text=DISK#logs")
                picked = page.locator("#logs-body tr")
                await expect(picked).to_have_count(1)
                await expect(picked).to_have_attribute("data-log-level", "warning")
                await expect(page.locator("#log-text")).to_have_value("DISK")


async def test_chromium_shows_an_error_banner_when_the_catalog_api_fails(tmp_path: Path) -> None:
    # The page served by an admin API that has no catalog routes: every call it makes fails.
    async with (
        running_echo(tmp_path / "echo", with_dashboard=True) as echo,
        browser_page() as page,
    ):
        await page.goto(f"{echo.admin_url}/dashboard")
        banner = page.locator("#error-banner")
        await expect(banner).to_be_visible()
        await expect(banner).to_contain_text("/api/v1/services: HTTP 404")
        await expect(banner).to_contain_text("/api/v1/cluster: HTTP 404")
        await expect(page.locator("#catalog-summary")).to_have_text("catalog: no answer")
        body = page.locator("body")
        await expect(body).to_have_attribute("data-loaded", "false")
        assert int(await body.get_attribute("data-errors") or 0) >= 2
        await expect(page.locator("#services-empty")).to_be_hidden()  # unknown is not empty
