"""The compose file as Compose v2 reads it (`docker compose config`: variables filled in
from their defaults and .env, every short form made long), what the images it runs
bring along (the ENV and HEALTHCHECK of their Dockerfiles), and the host ports it
publishes, as written (:func:`published_ports`: by the variable that moves each one).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from tests.support.deploy import ROOT

#: `ZBUS_COMPOSE_FILE=path` checks another compose file than the repository's.
COMPOSE_FILE_VAR: Final = "ZBUS_COMPOSE_FILE"

#: The Dockerfile of each image, when the compose file does not say how it is built.
DOCKERFILES: Final = {"zbus": "deploy/Dockerfile", "zbus-spark": "deploy/Dockerfile.spark"}


def compose_file() -> Path:
    return Path(os.environ.get(COMPOSE_FILE_VAR) or ROOT / "docker-compose.yml")


def _compose_binary() -> str:
    return str(Path(sys.executable).parent / "docker-compose")


def load(path: Path, overrides: Sequence[Path] = ()) -> dict[str, Any]:
    """The compose file's model as `docker compose config --format json` prints it, with
    the ``overrides`` files over it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    files = [arg for f in (path, *overrides) for arg in ("-f", str(f))]
    proc = subprocess.run(
        [_compose_binary(), *files, "config", "--format", "json"],
        cwd=path.parent,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if proc.returncode != 0:
        raise ValueError(f"docker compose config: {proc.stderr.strip()}")
    model: dict[str, Any] = json.loads(proc.stdout)
    return model


@dataclass
class Dockerfile:
    """The final stage of a Dockerfile: its ENV, HEALTHCHECK and ENTRYPOINT."""

    env: dict[str, str] = field(default_factory=dict)
    healthcheck: list[str] | None = None
    entrypoint: list[str] | None = None


def _instructions(text: str) -> list[tuple[str, str]]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        if not current and raw.lstrip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip():
            lines.append(current.strip())
        current = ""
    out = []
    for line in lines:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _exec_form(text: str) -> list[str]:
    if text.startswith("["):
        form: list[str] = json.loads(text)
        return form
    return ["/bin/sh", "-c", text]


def parse_dockerfile(path: Path) -> Dockerfile:
    result = Dockerfile()
    for word, rest in _instructions(path.read_text()):
        if word == "FROM":
            result = Dockerfile()  # a new stage; only the last one is the image
        elif word == "ENV":
            tokens = shlex.split(rest)
            if tokens and "=" not in tokens[0]:
                result.env[tokens[0]] = " ".join(tokens[1:])
            else:
                for token in tokens:
                    key, _, value = token.partition("=")
                    result.env[key] = value
        elif word == "HEALTHCHECK":
            if rest.upper() == "NONE":
                result.healthcheck = None
                continue
            cmd = rest[rest.upper().index("CMD") + 3 :].strip()
            result.healthcheck = ["CMD", *_exec_form(cmd)]
        elif word == "ENTRYPOINT":
            result.entrypoint = _exec_form(rest)
    return result


@dataclass
class ComposeService:
    """One service of the compose file, with what its image brings."""

    name: str
    image: str
    command: list[str]
    entrypoint: list[str] | None
    environment: dict[str, str]
    image_env: dict[str, str]
    ports: set[tuple[int, str]]
    healthcheck: list[str] | None

    @property
    def effective_env(self) -> dict[str, str]:
        """What the process sees: the image's ENV with the compose file's over it."""
        return {**self.image_env, **self.environment}


def _dockerfile_of(model_service: dict[str, Any], image: str, base: Path) -> Path:
    build = model_service.get("build")
    if isinstance(build, dict) and build.get("dockerfile"):
        context = Path(build.get("context") or base)
        dockerfile = Path(build["dockerfile"])
        return dockerfile if dockerfile.is_absolute() else context / dockerfile
    repository = image.rpartition(":")[0] if ":" in image.rpartition("/")[2] else image
    return base / DOCKERFILES[repository.rpartition("/")[2]]


def services(path: Path, overrides: Sequence[Path] = ()) -> dict[str, ComposeService]:
    model = load(path, overrides)
    out: dict[str, ComposeService] = {}
    for name, svc in (model.get("services") or {}).items():
        image = str(svc.get("image", ""))
        try:
            dockerfile = parse_dockerfile(_dockerfile_of(svc, image, path.parent))
        except (KeyError, OSError):
            dockerfile = Dockerfile()
        health = svc.get("healthcheck")
        if health is None:
            test = dockerfile.healthcheck
        elif health.get("disable"):
            test = None
        else:
            test = list(health.get("test") or []) or dockerfile.healthcheck
        ports = {
            (int(p["target"]), str(p.get("protocol") or "tcp").lower())
            for p in svc.get("ports") or []
        }
        out[name] = ComposeService(
            name=name,
            image=image,
            command=list(svc.get("command") or []),
            entrypoint=svc.get("entrypoint") or dockerfile.entrypoint,
            environment={
                k: "" if v is None else str(v) for k, v in (svc.get("environment") or {}).items()
            },
            image_env=dockerfile.env,
            ports=ports,
            healthcheck=test,
        )
    return out


#: A published port as docker-compose.yml writes them: the host's address and port (or
#: range) each from a variable with a default, then the container's port.
_PUBLISHED: Final = re.compile(
    r"\$\{ZBUS_PUBLISH_HOST:-[^}]*\}:"
    r"\$\{(?P<variable>\w+):-(?P<default>\d+(?:-\d+)?)\}:"
    r"(?P<target>\d+)(?:/(?P<protocol>tcp|udp))?"
)


@dataclass(frozen=True)
class PublishedPort:
    """One entry of a service's ``ports:`` as written in a compose file.

    ``variable`` is the compose variable that sets the host port (or range), with its
    ``default``; it is None for an entry in any other form (a fixed host port, say),
    which nothing can move.
    """

    service: str
    entry: str
    variable: str | None = None
    default: str = ""
    target: int = 0
    protocol: str = "tcp"

    @property
    def is_range(self) -> bool:
        return "-" in self.default


def published_ports(path: Path) -> list[PublishedPort]:
    """Every port ``path``'s services publish (all profiles), read from the file as written:
    ``docker compose config`` would fill in the variables this is about."""
    model = yaml.safe_load(path.read_text()) or {}
    found = []
    for service, spec in (model.get("services") or {}).items():
        for entry in (spec or {}).get("ports") or []:
            text = entry if isinstance(entry, str) else json.dumps(entry, sort_keys=True)
            match = _PUBLISHED.fullmatch(text) if isinstance(entry, str) else None
            if match is None:
                found.append(PublishedPort(service, text))
                continue
            found.append(
                PublishedPort(
                    service,
                    text,
                    match["variable"],
                    match["default"],
                    int(match["target"]),
                    match["protocol"] or "tcp",
                )
            )
    return found
