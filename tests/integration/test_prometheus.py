"""A real Prometheus server scraping real zbus services, and promtool on their metrics.

Needs the Debian package ``prometheus`` (it brings ``promtool``); `.ci/run` installs it.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.support.broker import running_broker
from tests.support.bus import running_bus
from tests.support.catalog import running_catalog
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, async_wait_until
from zbus.runtime.service import Service

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path is not None, f"{name} is missing: install the Debian package prometheus"
    return path


async def _metrics(service: Service) -> str:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{service.admin_url}/metrics")).text


def test_the_shipped_scrape_config_is_valid_and_matches_the_local_cluster() -> None:
    config = ROOT / "deploy" / "prometheus.yml"
    check = subprocess.run(
        [_tool("promtool"), "check", "config", str(config)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    cluster = tomllib.loads((ROOT / "deploy" / "local-cluster.toml").read_text())
    admin_ports = {f"127.0.0.1:{s['admin_port']}" for s in cluster["service"]}
    text = config.read_text()
    assert all(f'"{target}"' in text for target in admin_ports), admin_ports


async def test_prometheus_scrapes_the_services_and_promtool_accepts_their_metrics(
    tmp_path: Path,
) -> None:
    async with (
        running_catalog(tmp_path / "catalog") as catalog,
        running_bus(tmp_path / "bus", mc0_port=0) as bus,  # its mc0 door's metrics too
        running_broker(tmp_path / "broker") as broker,
    ):
        services: dict[str, Service] = {"catalog": catalog, "eventbus": bus, "broker": broker}
        for name, service in services.items():
            lint = await asyncio.create_subprocess_exec(
                _tool("promtool"),
                *("check", "metrics"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            out, _ = await lint.communicate((await _metrics(service)).encode())
            assert lint.returncode == 0, f"{name}: {out.decode()}"

        targets = "\n".join(
            f'      - targets: ["{urlsplit(s.admin_url or "").netloc}"]\n'
            f"        labels: {{service: {name}}}"
            for name, s in services.items()
        )
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: zbus\n"
            f"    static_configs:\n{targets}\n"
        )
        # Prometheus is told its port: held until it starts.
        held = HeldPorts()
        web = f"127.0.0.1:{held.port}"
        held.release()
        log = (tmp_path / "prometheus.log").open("wb")
        server = await asyncio.create_subprocess_exec(
            _tool("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={web}",
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            async with httpx.AsyncClient(base_url=f"http://{web}") as http:

                async def query(expr: str) -> list[dict[str, Any]]:
                    assert server.returncode is None, (tmp_path / "prometheus.log").read_text()
                    try:
                        answer = await http.get("/api/v1/query", params={"query": expr})
                    except httpx.TransportError:
                        return []
                    if answer.status_code != 200:
                        return []
                    result: list[dict[str, Any]] = answer.json()["data"]["result"]
                    return result

                async def all_up() -> bool:
                    up = await query("up")
                    return {r["metric"]["service"] for r in up if r["value"][1] == "1"} == set(
                        services
                    )

                await async_wait_until(all_up, within=60, what="every service scraped")
                # zbus's own series arrived, from each service.
                for name, metric in (
                    ("catalog", "zbus_catalog_events_total"),
                    ("eventbus", "zbus_eventbus_sequence"),
                    ("broker", "zbus_broker_workers_connected"),
                ):

                    async def present(metric: str = metric, name: str = name) -> bool:
                        rows = await query(f'{{__name__="{metric}",service="{name}"}}')
                        return bool(rows)

                    await async_wait_until(present, within=30, what=f"{metric} in Prometheus")
        finally:
            server.terminate()
            try:
                await asyncio.wait_for(server.wait(), 30 * UNIT)
            except TimeoutError:
                server.kill()
                await server.wait()
            log.close()
