"""URLs that services register, rewritten to be reachable from another host.

A service bound to every interface (``0.0.0.0`` in containers) registers that address in
its URLs; whoever reads them (the ``zbus`` command, the dashboard) puts in a host it can
reach instead.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import SplitResult, urlsplit, urlunsplit

__all__ = ["UNSPECIFIED_HOSTS", "host_of", "split_url", "url_host", "with_host"]

#: Hosts that say "every interface" rather than where the service can be reached.
UNSPECIFIED_HOSTS = frozenset({"0.0.0.0", "::", ""})


def split_url(url: str) -> SplitResult | None:
    """``url`` split into its parts, or None when it (or its port) is malformed."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        return None
    return parts


def host_of(address: str | None) -> str | None:
    """The host of a ``host:port`` address (IPv6 hosts too), or None."""
    if not address or ":" not in address:
        return None
    host = address.rsplit(":", 1)[0].strip("[]")
    return host or None


def url_host(host: str) -> str:
    """``host`` as the host part of a URL: an IPv6 address in brackets."""
    try:
        v6 = ipaddress.ip_address(host).version == 6
    except ValueError:
        v6 = False
    return f"[{host}]" if v6 else host


def with_host(parts: SplitResult, host: str) -> str:
    """The URL of ``parts`` with ``host`` as its host, its port kept, its path without a
    trailing slash, and no query or fragment."""
    port = parts.port
    netloc = url_host(host) + (f":{port}" if port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
