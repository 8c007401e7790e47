"""CURVE keys and the ZAP allow-list of client public keys.

A service with ``curve_secret_key`` configured turns CURVE on for every ZeroMQ port it
binds; with ``curve_allowed_clients`` (a directory of client public key files) only
those clients pass the ZAP handshake. Key files are ZeroMQ's own certificate format
(``zmq.auth.create_certificates``), so ``zbus keys generate`` output works with any
ZeroMQ tool.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import zmq
import zmq.auth
import zmq.utils.z85

from zbus.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A CURVE key pair in Z85 text, as ZeroMQ takes it."""

    public: bytes
    secret: bytes | None


def generate_keys(directory: Path, name: str) -> tuple[Path, Path]:
    """Write ``<name>.key`` (public) and ``<name>.key_secret`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    public, secret = zmq.auth.create_certificates(str(directory), name)
    Path(secret).chmod(0o600)
    return Path(public), Path(secret)


def load_keys(path: Path) -> KeyPair:
    """Load a key file; a secret file gives both halves, a public one only the public key.

    Raises:
        ConfigError: the file is missing or not a ZeroMQ certificate.
    """
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load CURVE key file {path}: {exc}") from None
    if public is None:
        raise ConfigError(f"CURVE key file {path} has no public-key")
    return KeyPair(public=public, secret=secret)


def make_server(sock: zmq.Socket[bytes], keys: KeyPair) -> None:
    """Make ``sock`` a CURVE server with ``keys``; call before bind."""
    if keys.secret is None:
        raise ConfigError("a CURVE server needs a secret key file, not a public one")
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    sock.curve_server = True


#: What a client takes to talk to a CURVE server: its own key pair, the server's public key.
CurveClient: TypeAlias = tuple[KeyPair, bytes]


def check_client(curve: CurveClient | None) -> CurveClient | None:
    """``curve`` as a client stores it, refused at once (not at its first socket, which
    may be a reconnect in the middle of work) when the key pair has no secret key.

    Raises:
        ConfigError: the key pair came from a public key file.
    """
    if curve is not None and curve[0].secret is None:
        raise ConfigError("a CURVE client needs a secret key file, not a public one")
    return curve


def client_keys(secret_key: Path, server_public_key: Path, what: str) -> CurveClient:
    """A client's ``curve`` from its secret key file and the server's public key file;
    ``what`` names the secret key's setting or option in the error.

    Raises:
        ConfigError: a file is missing or not a key file, or the secret one holds no
            secret key.
    """
    keys = load_keys(secret_key)
    if keys.secret is None:
        raise ConfigError(f"{what} {secret_key} holds no secret key")
    return keys, load_keys(server_public_key).public


def make_client(sock: zmq.Socket[Any], keys: KeyPair, server_public: bytes) -> None:
    """Make ``sock`` a CURVE client of a server whose public key is ``server_public``."""
    if keys.secret is None:
        raise ConfigError("a CURVE client needs a secret key file, not a public one")
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    sock.curve_serverkey = server_public


#: The ZAP domain of sockets that admit any CURVE key and check the peer's key
#: themselves (the catalog's DBP port, which answers an unlisted key with DENIED).
OPEN_DOMAIN = "zbus-open"


def allowed_keys(allowed_dir: Path) -> frozenset[bytes]:
    """The client public keys (32 raw bytes each) in an allow-list directory.

    Raises:
        ConfigError: the directory is missing or holds a file that is not a certificate.
    """
    if not allowed_dir.is_dir():
        raise ConfigError(f"curve_allowed_clients {allowed_dir} is not a directory")
    try:
        listed = zmq.auth.load_certificates(str(allowed_dir))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load CURVE keys from {allowed_dir}: {exc}") from None
    return frozenset(zmq.utils.z85.decode(key) for key in listed)


class _Keys:
    """A ZAP credentials provider: ``callback(domain, z85_key) -> allowed``."""

    def __init__(self, keys: frozenset[bytes] | None) -> None:
        self.keys = keys  # None admits every key

    def callback(self, domain: str, key: bytes) -> bool:
        return self.keys is None or zmq.utils.z85.decode(key) in self.keys


class ZapAllowList:
    """A ZAP handler in its own thread that admits only the listed client public keys,
    except on sockets in :data:`OPEN_DOMAIN`, which admit any key. The handshake's
    User-Id is the client's public key in Z85 (see :func:`peer_key`)."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], allowed_dir: Path | None) -> None:
        # Imported here, not at the top: zmq.auth.thread imports asyncio, and the clients
        # (which import this module for their keys) must not pay for what only servers use.
        from zmq.auth.thread import ThreadAuthenticator

        # No directory: every key is admitted but on the domains given to :meth:`admit`.
        self.keys = None if allowed_dir is None else allowed_keys(allowed_dir)
        self._auth = ThreadAuthenticator(ctx, log=logging.getLogger("zbus.zap"))
        self._dir = allowed_dir

    def start(self) -> None:
        self._auth.start()
        self._auth.configure_curve_callback(domain="*", credentials_provider=_Keys(self.keys))
        self._auth.configure_curve_callback(domain=OPEN_DOMAIN, credentials_provider=_Keys(None))
        log.info(
            "zap allow-list loaded",
            extra={"clients": -1 if self.keys is None else len(self.keys), "dir": str(self._dir)},
        )

    def admit(self, domain: str, keys: frozenset[bytes]) -> None:
        """Admit only ``keys`` on the sockets of ``domain`` (a replica group's own port)."""
        self._auth.configure_curve_callback(domain=domain, credentials_provider=_Keys(keys))

    @property
    def thread(self) -> threading.Thread:
        """The handler's thread (once started): without it no CURVE client gets in."""
        return self._auth.thread

    def stop(self) -> None:
        self._auth.stop()


def peer_key(frame: zmq.Frame) -> bytes | None:
    """The CURVE public key (32 raw bytes) of the peer ``frame`` came from, or None when
    the socket does not run CURVE with a ZAP handler."""
    try:
        user = frame.get("User-Id")
    except zmq.ZMQError:
        return None
    if not isinstance(user, str) or len(user) != 40:
        return None
    try:
        return zmq.utils.z85.decode(user)
    except ValueError:
        return None
