"""One MCP server's connection, kept up in the background: started, its tools listed, watched,
and restarted with backoff when it fails (docs/tools.md#mcp-servers).

The SDK lives here and nowhere else: its sessions, its tool listings and results, and its
errors, which become a :class:`CallFailed` carrying the outcome counted in the metrics. A
server that cannot start, dies, hangs or answers garbage fails the call that met it, never
the turn, and never the process: the connection's own task restarts it.

The session's transports (anyio task groups) must be entered and left by one task: the
connection's ``run``. A call comes from a turn's task and only sends a request on the open
session; a call that finds the connection closed marks it broken and ``run`` starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Implementation, PaginatedRequestParams, TextContent

from bot.core.clock import Clock
from bot.core.errors import PersonabotError
from bot.mcp.spec import ServerSpec, Stdio

log = logging.getLogger("personabot.mcp")

#: JSON-RPC error codes the SDK raises for a closed connection and a request out of time.
CONNECTION_CLOSED: Final = -32000
REQUEST_TIMEOUT: Final = -32001
#: An idle connection is pinged this often (on the runtime's clock), so that a server that
#: died between calls is restarted before the next call meets it.
PING_EVERY_SECONDS: Final = 60.0
_CLIENT: Final = Implementation(name="personabot", version="1")


class State(enum.Enum):
    """Where a connection is in its life."""

    STARTING = "starting"
    UP = "up"
    DOWN = "down"  # failed: restarting after the backoff
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class Listed:
    """A tool as the server listed it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    #: The server's own hint (MCP ``readOnlyHint``): shown to the operator, never trusted.
    read_only_hint: bool | None = None


class CallFailed(PersonabotError):
    """A tool call that got no usable answer; ``outcome`` labels it in the metrics."""

    def __init__(self, reason: str, *, outcome: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.outcome = outcome


#: Told of every change of state (the metrics' gauge, the health page).
OnChange = Callable[["Connection"], None]


class Connection:
    """One server's session, started and restarted by ``run`` (a task owned by McpServers)."""

    def __init__(self, spec: ServerSpec, *, clock: Clock, on_change: OnChange | None = None):
        self.spec = spec
        self._clock = clock
        self._on_change = on_change
        self.state = State.STARTING
        #: The last listing (kept while the server restarts, so the request stays the same).
        self.listed: tuple[Listed, ...] = ()
        #: Why it last failed (no secrets: never a header, an environment value or a URL).
        self.problem: str | None = None
        #: When the next start is due while DOWN (the runtime's clock).
        self.retry_at: float | None = None
        self.restarts = 0
        self._session: ClientSession | None = None
        self._broken: str | None = None
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        # The last HTTP error status the server answered (the SDK's error does not say it).
        self._status: int | None = None

    # -- the life of the connection ----------------------------------------------------------

    async def run(self) -> None:
        """Keep the server connected until cancelled: start, serve, and after a failure wait
        (doubling, capped) and start again."""
        failures = 0
        try:
            while True:
                self._set(State.STARTING)
                self._status = None
                came_up = False
                try:
                    came_up, reason = await self._serve()
                except Exception as exc:  # whatever the server or transport did: restart
                    reason = why(exc, self.spec)
                reason = self._with_status(reason)
                failures = 1 if came_up else failures + 1
                delay = self.spec.backoff(failures)
                self.problem = reason
                self.retry_at = self._clock.now() + delay
                log.warning(
                    "MCP server %s: %s; restarting in %.0f s", self.spec.name, reason, delay
                )
                self._set(State.DOWN)
                await self._clock.sleep(delay)
                self.restarts += 1
        finally:
            self._set(State.CLOSED)

    async def _serve(self) -> tuple[bool, str]:
        """Connect, list the tools, and watch until the connection breaks; (came up, why)."""
        limit = self.spec.start_timeout_seconds
        async with _session(self.spec, self._answered) as session:
            try:
                async with asyncio.timeout(limit):
                    await session.initialize()
                    self.listed = await _listed(session)
            except TimeoutError:
                return False, f"did not start within {limit:g} s"
            self._hints()
            self._broken = None
            self._wake.clear()
            self._session = session
            self.problem = self.retry_at = None
            offered = [t.name for t in self.listed if t.name in self.spec.tools]
            log.info("MCP server %s: up, offering %s", self.spec.name, ", ".join(offered) or "none")
            self._set(State.UP)
            try:
                return True, await self._watch(session)
            finally:
                self._session = None

    async def _watch(self, session: ClientSession) -> str:
        """Wait until a call finds the connection broken, pinging when idle or when a call
        ran out of time (the server may hang as a whole, not just that tool)."""
        while True:
            woken = await self._woken_within(PING_EVERY_SECONDS)
            if self._broken is not None:
                return self._broken
            if woken:
                self._wake.clear()
            try:
                async with asyncio.timeout(self.spec.call_timeout_seconds):
                    await session.send_ping()
            except TimeoutError:
                return f"no answer to a ping within {self.spec.call_timeout_seconds:g} s"
            except Exception as exc:
                return f"no answer to a ping ({why(exc, self.spec)})"

    async def _woken_within(self, seconds: float) -> bool:
        sleep = asyncio.ensure_future(self._clock.sleep(seconds))
        wake = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleep, wake}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleep.cancel()
            wake.cancel()
        return self._wake.is_set()

    def _hints(self) -> None:
        """The operator's word decides effects; a server hinting otherwise is pointed out."""
        for tool in self.listed:
            said = self.spec.tools.get(tool.name)
            if said == "read_only" and tool.read_only_hint is False:
                log.warning(
                    "MCP server %s: %s is configured read_only but the server says it is not "
                    'read-only; consider tool_effects = { %s = "effectful" }',
                    self.spec.name,
                    tool.name,
                    tool.name,
                )
        missing = sorted(set(self.spec.tools) - {t.name for t in self.listed})
        if missing:
            log.warning(
                "MCP server %s: lists no tool %s (configured in tools; not offered)",
                self.spec.name,
                ", ".join(missing),
            )

    def _with_status(self, reason: str) -> str:
        status = self._status
        if status is None or f"HTTP {status}" in reason:
            return reason
        return f"{reason} (HTTP {status})"

    async def _answered(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self._status = response.status_code

    def _set(self, state: State) -> None:
        self.state = state
        self._changed.set()
        self._changed = asyncio.Event()
        if self._on_change is not None:
            self._on_change(self)

    async def wait_for(self, state: State) -> None:
        """Return once the connection is in ``state`` (tests and the start-up log wait)."""
        while self.state is not state:
            await self._changed.wait()

    # -- calls -------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """The text of the tool's answer; CallFailed when there is none to give."""
        session = self._session
        if session is None or self.state is not State.UP:
            reason = self.problem or "still starting"
            raise CallFailed(f"the server is not connected ({reason})", outcome="unavailable")
        limit = self.spec.call_timeout_seconds
        try:
            result = await session.call_tool(tool, dict(arguments), read_timeout_seconds=limit)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                self._wake.set()  # is the whole server stuck? the watcher pings it now
                raise CallFailed(f"no answer within {limit:g} s", outcome="timeout") from None
            if exc.code == CONNECTION_CLOSED:
                self._break("its connection closed during a call")
                raise CallFailed(
                    "the server's connection closed (it is being restarted)", outcome="failed"
                ) from None
            raise CallFailed(
                f"the server refused the call: {exc.message}", outcome="error"
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            self._break("its connection closed during a call")
            raise CallFailed("the server's connection closed", outcome="failed") from None
        except Exception as exc:  # an answer the SDK could not read
            raise CallFailed(f"unusable answer ({type(exc).__name__})", outcome="failed") from None
        text = _text(result)
        if result.is_error:
            raise CallFailed(text or "the server reported an error", outcome="error")
        return text

    def _break(self, reason: str) -> None:
        if self._broken is None:
            self._broken = reason
        self._wake.set()


@contextlib.asynccontextmanager
async def _session(
    spec: ServerSpec, answered: Callable[[httpx2.Response], Awaitable[None]]
) -> AsyncIterator[ClientSession]:
    """An open (not yet initialized) session over the server's transport; ``answered`` sees
    every HTTP response (its status)."""
    transport = spec.transport
    async with contextlib.AsyncExitStack() as stack:
        if isinstance(transport, Stdio):
            params = StdioServerParameters(
                command=transport.command,
                args=list(transport.args),
                env=dict(transport.env) or None,
                cwd=transport.cwd,
            )
            streams = await stack.enter_async_context(stdio_client(params))
        else:
            client = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(transport.headers),
                    timeout=httpx2.Timeout(spec.start_timeout_seconds, read=300.0),
                    event_hooks={"response": [answered]},
                )
            )
            streams = await stack.enter_async_context(
                streamable_http_client(transport.url, http_client=client)
            )
        yield await stack.enter_async_context(ClientSession(*streams, client_info=_CLIENT))


async def _listed(session: ClientSession) -> tuple[Listed, ...]:
    """Every tool the server lists, over all pages."""
    found: list[Listed] = []
    cursor: str | None = None
    while True:
        params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
        page = await session.list_tools(params=params)
        for tool in page.tools:
            hint = tool.annotations.read_only_hint if tool.annotations is not None else None
            schema = dict(tool.input_schema)
            found.append(Listed(tool.name, tool.description or tool.name, schema, hint))
        cursor = page.next_cursor
        if cursor is None:
            return tuple(found)


def _text(result: CallToolResult) -> str:
    """What the model reads of a result: its text blocks; other kinds are named, not shown."""
    parts = [
        block.text if isinstance(block, TextContent) else f"[{block.type} content not shown]"
        for block in result.content
    ]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def why(exc: BaseException, spec: ServerSpec) -> str:
    """A failure in words for the log and the health page, without secrets: never an
    exception's full text where it may hold a URL, a header or the server's environment."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return why(exc.exceptions[0], spec)
    if isinstance(exc, MCPError):
        return _short(exc.message)
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, httpx2.HTTPError):
        return f"cannot reach the server ({type(exc).__name__})"
    if isinstance(exc, FileNotFoundError) and isinstance(spec.transport, Stdio):
        return f"cannot start {spec.transport.command!r}: not found"
    if isinstance(exc, OSError):
        return f"{type(exc).__name__}: {exc.strerror or 'failed'}"
    return type(exc).__name__


def _short(text: str, limit: int = 160) -> str:
    """One line of at most ``limit`` characters: an SDK's message may quote a server's whole
    unreadable answer (its raw bytes, over many lines), which belongs in no log line and on
    no health page."""
    line = text.strip().splitlines()[0] if text.strip() else "failed"
    if "input_value=" in line:
        line = line.split("input_value=", 1)[0].rstrip(" ,[") + " (an unreadable answer)"
    return line if len(line) <= limit else line[: limit - 1] + "…"
