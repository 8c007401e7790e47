"""The one error type the codecs raise, and helpers that build it with a clear message."""

from __future__ import annotations

from collections.abc import Sequence

from zbus.errors import ZbusError


class ProtocolError(ZbusError, ValueError):
    """A frame list that is not a valid command of its protocol.

    Attributes:
        protocol: short protocol name, e.g. ``"eventbus"`` or ``"emqp"``.
        command: the command being decoded, or ``None`` when it could not be told.
        frame: index of the offending frame in the list given to ``decode``, or
            ``None`` when the problem is the list as a whole (e.g. its length).
        expected: what the decoder expected to find there.
    """

    def __init__(
        self,
        protocol: str,
        expected: str,
        *,
        command: str | None = None,
        frame: int | None = None,
        got: object = None,
    ) -> None:
        self.protocol = protocol
        self.command = command
        self.frame = frame
        self.expected = expected
        where = f"{protocol} {command or '<unknown command>'}"
        if frame is not None:
            where += f" frame {frame}"
        message = f"{where}: expected {expected}"
        if got is not None:
            message += f", got {_preview(got)}"
        super().__init__(message)


class FrameCountError(ProtocolError):
    """The message has the wrong number of frames for its command."""


class UnknownCommandError(ProtocolError):
    """The command frame names no command of the protocol."""


class FrameValueError(ProtocolError):
    """A frame is present but its content is not what the command requires."""


class NumberRangeError(FrameValueError):
    """A number in a frame is well formed but outside what the protocol can carry
    (e.g. an unsigned 64-bit field given 2**64, or a JSON integer beyond 64 bits)."""


def _preview(value: object, limit: int = 40) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        text = repr(data[:limit])
        return text + (f"... ({len(data)} bytes)" if len(data) > limit else "")
    text = repr(value)
    return text if len(text) <= limit + 10 else text[: limit + 7] + "..."


def expect_count(
    protocol: str,
    command: str,
    frames: Sequence[bytes],
    low: int,
    high: int | None = None,
) -> None:
    """Raise :class:`FrameCountError` unless ``low <= len(frames) <= high``.

    ``high=None`` means exactly ``low``; pass ``high=-1`` for "at least ``low``".
    """
    n = len(frames)
    top = low if high is None else high
    if n < low or (top >= 0 and n > top):
        if top == low:
            want = f"{low} frames"
        elif top < 0:
            want = f"at least {low} frames"
        else:
            want = f"{low} to {top} frames"
        raise FrameCountError(protocol, want, command=command, got=f"{n} frames")


def text(protocol: str, command: str, frames: Sequence[bytes], index: int, what: str) -> str:
    """Frame ``index`` decoded as strict UTF-8, or :class:`FrameValueError`."""
    try:
        return bytes(frames[index]).decode("utf-8")
    except UnicodeDecodeError:
        raise FrameValueError(
            protocol, f"{what} as UTF-8 text", command=command, frame=index, got=frames[index]
        ) from None


def uint64(protocol: str, command: str, frames: Sequence[bytes], index: int, what: str) -> int:
    """Frame ``index`` as an 8-byte big-endian unsigned integer."""
    raw = frames[index]
    if len(raw) != 8:
        raise FrameValueError(
            protocol, f"{what} as 8 bytes in network order", command=command, frame=index, got=raw
        )
    return int.from_bytes(raw, "big")


def ascii_uint(protocol: str, command: str, frames: Sequence[bytes], index: int, what: str) -> int:
    """Frame ``index`` as an unsigned integer in ASCII decimal text."""
    raw = bytes(frames[index])
    if not raw or not raw.isdigit():
        raise FrameValueError(
            protocol, f"{what} as ASCII decimal digits", command=command, frame=index, got=raw
        )
    # The length first: int() of thousands of digits is slow, and beyond 4,300 an error.
    if len(raw) > 20 or (value := int(raw)) >= 1 << 64:
        raise NumberRangeError(
            protocol, f"{what} below 2**64", command=command, frame=index, got=raw
        )
    return value


def encode_text(value: str) -> bytes:
    return value.encode("utf-8")


def check_uint64(protocol: str, command: str, what: str, value: int) -> None:
    """Encoding-side guard: ``value`` must fit an unsigned 64-bit integer."""
    if not 0 <= value < 1 << 64:
        raise NumberRangeError(protocol, f"{what} in 0..2**64-1", command=command, got=value)
