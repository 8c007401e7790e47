"""The cluster dashboard, served by a real catalog: the cluster view over real admin
APIs, the page and its files, and the page as headless Chromium renders it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.catalog.test_catalog import running_catalog
from tests.integration.catalog.test_log_aggregation import shipping_logger
from tests.support.bus import bus_on_base_port
from tests.support.echo_service import EchoService, EchoSettings
from tests.support.waiting import UNIT, async_wait_for
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

    await async_wait_for(started, what="echo service start")
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


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(
            "the dashboard tests need headless Chromium: install the Debian package "
            "`chromium` (apt-get install chromium)"
        )
    return path


async def dump_dom(url: str, profile: Path) -> Element:
    """The page at ``url`` as headless Chromium leaves it after 5 s of (virtual) time."""
    proc = await asyncio.create_subprocess_exec(
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--no-proxy-server",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its helper processes go with it on a timeout
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60 * UNIT)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise AssertionError(f"chromium did not dump {url} within {60 * UNIT:g} s") from None
    assert proc.returncode == 0, f"chromium failed ({proc.returncode}): {err.decode()[-2000:]}"
    return parse_html(out.decode())


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
        assert links and all(link.startswith("/dashboard/static/") for link in links)
        assert "@import" not in style.text and "url(" not in style.text

        # The catalog's own routes are all still there.
        assert (await get(catalog, "/api/v1/services")).json() == {"services": []}
        assert (await get(catalog, "/healthz")).json() == {"status": "ok"}


async def test_chromium_renders_services_their_state_and_the_logs(tmp_path: Path) -> None:
    async with (
        bus_on_base_port(tmp_path / "bus") as base,
        running_catalog(tmp_path / "catalog", eventbus_endpoint=base) as catalog,
        running_echo(tmp_path / "echo") as echo,
    ):
        page = f"{catalog.admin_url}/dashboard"

        # Nothing registered yet: the empty state, and no error.
        empty = await dump_dom(page, tmp_path / "profile-empty")
        body = empty.all("body")[0]
        assert body.attrs.get("data-loaded") == "true"
        assert body.attrs.get("data-errors") == "0"
        assert visible(empty.by_id("services-empty"))
        assert "no services registered" in empty.by_id("services-empty").text()
        assert not visible(empty.by_id("services-table"))
        assert empty.all("tr", data_service=None) == []
        assert not visible(empty.by_id("error-banner"))
        assert "catalog" in empty.by_id("catalog-summary").text()

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
                await async_wait_for(lambda: logged(1), what="the first log record")
                logger.warning("disk <b>almost</b> full", extra={"free_bytes": 1024})
                await async_wait_for(lambda: logged(2), what="the second log record")

                dom = await dump_dom(page, tmp_path / "profile-full")
                filtered = await dump_dom(
                    f"{page}?level=warning&text=DISK", tmp_path / "profile-filtered"
                )

        assert dom.all("body")[0].attrs.get("data-errors") == "0"
        assert not visible(dom.by_id("error-banner"))
        assert not visible(dom.by_id("services-empty"))
        assert visible(dom.by_id("services-table"))
        rows = {r.attrs["data-service"]: r for r in dom.by_id("services-body").all("tr")}
        assert sorted(rows) == ["svc-dead", "svc-live"]
        for name, row in rows.items():
            assert row.attrs["data-state"] == "active"
            assert row.all("td", data_field="name")[0].text() == name
            assert row.all("td", data_field="state")[0].text() == "active"
            assert row.all("td", data_field="function")[0].text() == "test"
        live, dead = rows["svc-live"], rows["svc-dead"]
        assert live.all("a")[0].attrs["href"].rstrip("/") == echo.admin_url
        live_cell = live.all("td", data_field="live")[0]
        assert live_cell.attrs["data-live"] == "ok"
        assert live_cell.attrs["data-ready"] == "true"
        assert echo.endpoints["echo"] in live.all("td", data_field="endpoints")[0].text()
        dead_cell = dead.all("td", data_field="live")[0]
        assert dead_cell.attrs["data-live"] == "error"
        assert "cannot connect" in dead_cell.text()

        logs = dom.by_id("logs")
        assert visible(logs.by_id("logs-table"))
        records = logs.all("tr", data_log_level=None)
        assert [(r.attrs["data-log-level"], r.attrs["data-log-service"]) for r in records] == [
            ("warning", "svc-live"),
            ("info", "svc-live"),
        ]
        # Data is shown as text, never as markup.
        assert (
            records[0].all("td", data_field="msg")[0].text().startswith("disk <b>almost</b> full")
        )
        assert "free_bytes=1024" in records[0].text()
        assert logs.all("b") == []
        assert records[1].all("td", data_field="msg")[0].text() == "hello from svc-live"

        # The filters start from the page's query and ask the catalog for what they match.
        picked = filtered.by_id("logs").all("tr", data_log_level=None)
        assert [r.attrs["data-log-level"] for r in picked] == ["warning"]
        assert filtered.by_id("log-text").attrs.get("value", "") in ("", "DISK")


async def test_chromium_shows_an_error_banner_when_the_catalog_api_fails(tmp_path: Path) -> None:
    # The page served by an admin API that has no catalog routes: every call it makes fails.
    async with running_echo(tmp_path / "echo", with_dashboard=True) as echo:
        dom = await dump_dom(f"{echo.admin_url}/dashboard", tmp_path / "profile")
    banner = dom.by_id("error-banner")
    assert visible(banner)
    assert "/api/v1/services: HTTP 404" in banner.text()
    assert "/api/v1/cluster: HTTP 404" in banner.text()
    body = dom.all("body")[0]
    assert body.attrs.get("data-loaded") == "false"
    assert int(body.attrs["data-errors"]) >= 2
    assert not visible(dom.by_id("services-empty"))  # unknown is not empty
    assert dom.by_id("catalog-summary").text() == "catalog: no answer"
