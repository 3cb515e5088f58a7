"""Bounds on what an API request may carry: body size, JSON nesting, string contents, numbers.

Every field a request can set is bounded, so no request makes the plane store, log or run something it
cannot handle (10 MB command lines, infinite durations, NUL bytes PostgreSQL refuses, offsets past 2**63).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Annotated, Any

from pydantic import AfterValidator, Field

MAX_BODY_BYTES = 1 << 20
"""The largest request body accepted (413 above)."""
MAX_JSON_DEPTH = 64
MAX_INT64 = (1 << 63) - 1
"""Sequence numbers and offsets are 64-bit signed in the database and in ``seek``."""
MAX_DURATION_S = 366 * 86400.0
"""Durations and intervals a job may declare: at most a year."""
MAX_ENTRYPOINT_ARGS = 1024
MAX_ARG_CHARS = 8192
MAX_ENV_VARS = 256
MAX_ENV_VALUE_CHARS = 16384
MAX_BATCH_JOBS = 1000
"""The most jobs one bulk submission (``POST /v1/jobs/batch``) may carry; the body limit applies as well."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _plain_text(value: str) -> str:
    """Refuse NUL bytes (no database or ``exec`` takes them) and lone surrogates (not encodable as UTF-8)."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid Unicode (no lone surrogates)") from exc
    return value


PlainText = Annotated[str, AfterValidator(_plain_text)]
Arg = Annotated[PlainText, Field(max_length=MAX_ARG_CHARS)]
EnvName = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
EnvValue = Annotated[PlainText, Field(max_length=MAX_ENV_VALUE_CHARS)]
Seconds = Annotated[float, Field(gt=0, le=MAX_DURATION_S, allow_inf_nan=False)]


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply ``value`` nests lists and objects, counting no further than ``limit + 1``."""
    depth = 0
    level = [value]
    while level and depth <= limit:
        nested: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                nested.extend(item.values())
            elif isinstance(item, list):
                nested.extend(item)
        if not nested:
            break
        depth += 1
        level = nested
    return depth


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is answered 413 before the app reads it."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, counting its body; refuse it once it is too large."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(send, self.limit)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await _too_large(send, self.limit)


class _TooLarge(Exception):
    pass


async def _too_large(send: Send, limit: int) -> None:
    body = f'{{"detail": "request body larger than {limit} bytes"}}'.encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
