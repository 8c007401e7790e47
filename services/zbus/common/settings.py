"""Settings of every zbus service: ``ZBUS_`` environment variables and matching CLI flags.

Each service subclasses :class:`ServiceSettings`; a field ``admin_port`` is read from
``ZBUS_ADMIN_PORT`` or ``--admin-port``. The same names are used in the compose file,
the Helm values and the docs. CLI flags win over the environment, which wins over
the defaults.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from zbus.common.endpoints import parse_tcp_endpoint

# ConfigError is defined in zbus.errors (free of pydantic, so clients can raise it);
# it stays importable from here, where the services have always taken it.
from zbus.errors import ConfigError as ConfigError


class ServiceSettings(BaseSettings):
    """What every service is configured with."""

    model_config = SettingsConfigDict(
        env_prefix="ZBUS_",
        extra="forbid",
        validate_default=True,
    )

    host: str = Field("127.0.0.1", description="address the ZeroMQ and admin ports bind to")
    admin_port: int = Field(0, ge=0, le=65535, description="admin HTTP port (0: any free port)")
    data_dir: Path = Field(Path(".zbus/data"), description="where the service keeps its files")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    shutdown_timeout: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="seconds a graceful shutdown may take before it is forced",
    )
    admin_token: str | None = Field(
        None, description="bearer token required by admin endpoints that change state"
    )
    curve_secret_key: Path | None = Field(
        None, description="this service's CURVE secret key file; enables CURVE on every port"
    )
    curve_allowed_clients: Path | None = Field(
        None, description="directory of client public key files allowed to connect (ZAP)"
    )
    eventbus_endpoint: str = Field(
        "",
        description="event bus base endpoint tcp://host:P the service ships its logs to "
        "(the replicas of a group: several, comma-separated; empty: none)",
    )

    catalog_endpoint: str = Field(
        "",
        description="the catalog's DBP endpoint tcp://host:5246 the service registers with "
        "(empty: none)",
    )
    catalog_public_key: Path | None = Field(
        None,
        description="the catalog's CURVE public key file: registration then runs over "
        "CURVE with this service's own key pair (curve_secret_key)",
    )
    eventbus_public_key: Path | None = Field(
        None,
        description="the event bus's CURVE public key file: what this service sends to "
        "the bus (logs, announcements) then goes over CURVE with its own key pair",
    )
    broker_public_key: Path | None = Field(
        None,
        description="the broker's CURVE public key file: a worker then connects over "
        "CURVE with its own key pair",
    )
    node_name: str = Field(
        "",
        description="the name the service registers under (empty: the service's name); "
        "{hostname} in it becomes this host's name, so that replicas differ",
    )
    lifeline_fd: int | None = Field(
        None,
        ge=0,
        description="read end of a pipe from the process that started the service: the "
        "service shuts down when the pipe closes (`zbus up` sets it; unset: none)",
    )

    @field_validator("catalog_endpoint")
    @classmethod
    def _catalog_endpoint(cls, value: str) -> str:
        if value:
            parse_tcp_endpoint(value)
        return value

    @field_validator("eventbus_endpoint")
    @classmethod
    def _bus_endpoint(cls, value: str) -> str:
        # One bus, or the replicas of a group, comma-separated.
        for entry in filter(None, (e.strip() for e in value.split(","))):
            parse_tcp_endpoint(entry, room=3)  # the bus's sockets are P..P+3
        return value

    @classmethod
    def load(cls, argv: Sequence[str] | None = None, **overrides: Any) -> Self:
        """Settings from defaults, ``ZBUS_*`` environment and (when given) CLI arguments.

        Raises:
            ConfigError: with every invalid field named, instead of a stack trace.
        """
        try:
            if argv is None:
                return cls(**overrides)
            cli: dict[str, Any] = {
                "_cli_parse_args": list(argv),
                "_cli_kebab_case": True,
                "_cli_exit_on_error": False,
                "_cli_prog_name": f"zbus {cls.service_name()}",
            }
            return cls(**cli, **overrides)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ConfigError(f"invalid configuration: {problems}") from None
        except SettingsError as exc:
            raise ConfigError(f"invalid configuration: {exc}") from None

    def registered_name(self, service: str) -> str:
        """The name to register (and produce) under: ``node_name`` with ``{hostname}``
        replaced by this host's name (a container's own, so every replica of a scaled
        service has one of its own), or ``service`` when ``node_name`` is empty."""
        if not self.node_name:
            return service
        return self.node_name.replace("{hostname}", socket.gethostname())

    @classmethod
    def service_name(cls) -> str:
        return cls.__name__.removesuffix("Settings").lower() or "service"
