"""Plugins' own resources: opened when the runtime starts, closed when it stops.

A plugin registers a lifespan in ``setup(app)`` (docs/plugins.md#resources-lifespan), the
way Starlette's ``lifespan`` works: the code before its ``yield`` runs when the bots start,
the code after it when they stop. ``setup`` itself opens nothing: it also runs for ``config
check``, which never starts a bot.

The rules (each tested in tests/plugins/test_lifespan.py):

- lifespans start in registration order (the TOML's order of plugins), before the runtime
  opens the store; they stop in reverse order after the runtime stopped (running turns
  finished, so an ``after_reply`` hook still has what it uses);
- when one fails to start, those already started are stopped (in reverse) and the start
  fails with one ``PluginError`` line that names the plugin; nothing is left open;
- every stop runs, even when an earlier one raised: a failed stop is logged, never raised,
  so one plugin cannot keep another's resource open;
- a stop request while they start (SIGTERM to ``personabot run``: ``give_up``) cancels the
  start that runs, or the one about to begin: a lifespan that never returns cannot keep the
  process from stopping; those started are stopped again;
- a second SIGINT (``personabot run``'s abort: ``abandon_stops``) gives up a close that is
  still running (one that never returns would keep the process alive) and gives each close
  after it ``ABANDONED_CLOSE_SECONDS``;
- a runtime started inside another one of the same App (the console's playground inside
  ``personabot run``) shares them: they start at the first start and stop at the last stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from bot.core.errors import ConfigError, PluginError

log = logging.getLogger("personabot.plugins")

#: How long each close may take once a second SIGINT asked to abort the shutdown.
ABANDONED_CLOSE_SECONDS = 1.0

#: What ``@app.lifespan`` decorates: an async generator function that yields once, or a
#: function returning an async context manager (``@contextlib.asynccontextmanager``).
Lifespan = Callable[[], Any]


@dataclass(frozen=True, slots=True)
class _Registered:
    label: str  # the plugin, as errors name it: "plugins[1] 'my_plugin'"
    open: Callable[[], AbstractAsyncContextManager[object]]


class Lifespans:
    """The lifespans registered on one App, started and stopped together."""

    def __init__(self, describe: Callable[[BaseException], str]) -> None:
        self._registered: list[_Registered] = []
        self._started: list[tuple[str, AbstractAsyncContextManager[object]]] = []
        self._users = 0
        self._describe = describe
        self._starting: asyncio.Task[Any] | None = None
        #: Set by ``give_up``: the start was (or is to be) cancelled by a stop request.
        self.given_up = False
        self._stopping: asyncio.Task[Any] | None = None
        self._abandoned = False

    def add(self, label: str, fn: Lifespan) -> None:
        """Register ``fn`` for the plugin ``label``; ConfigError when it is neither form."""
        if inspect.isasyncgenfunction(fn):
            made: Callable[[], AbstractAsyncContextManager[object]] = (
                contextlib.asynccontextmanager(fn)
            )
        elif callable(fn) and not (inspect.iscoroutinefunction(fn) or _plain_generator(fn)):
            made = fn
        else:
            name = getattr(fn, "__qualname__", fn)
            raise ConfigError(
                [f"lifespan {name!r}: must be an async generator function that yields once"]
            )
        self._registered.append(_Registered(label, made))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Start every lifespan (at the first of nested entries), stop them at the exit."""
        self._users += 1
        try:
            if self._users == 1 and self._registered:
                if self.given_up:
                    raise asyncio.CancelledError  # stopped before they started: start none
                self._starting = asyncio.current_task()
                try:
                    for each in self._registered:
                        await self._start(each)
                finally:
                    self._starting = None
            yield
        finally:
            # Also after a failed start: what started before it stops again.
            self._users -= 1
            if self._users == 0:
                await self._stop_all()

    def give_up(self) -> None:
        """A stop request while the bots start: cancel the lifespans' start running now (the
        task awaiting it gets ``CancelledError``), or refuse the one about to begin."""
        self.given_up = True
        if self._starting is not None:
            self._starting.cancel()

    def abandon_stops(self) -> None:
        """The shutdown is aborted (a second SIGINT): the close running now is cancelled,
        each one after it gets ``ABANDONED_CLOSE_SECONDS``."""
        self._abandoned = True
        if self._stopping is not None:
            self._stopping.cancel()

    async def _start(self, each: _Registered) -> None:
        try:
            manager = each.open()
            if not hasattr(manager, "__aenter__"):
                raise TypeError(f"returned {type(manager).__name__}, not an async context manager")
            await manager.__aenter__()
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # we are cancelled (a stop request): not the plugin's failure
            raise PluginError(f"{each.label}: startup failed: {self._describe(exc)}") from None
        except Exception as exc:
            log.debug("%s: startup failed", each.label, exc_info=True)
            raise PluginError(f"{each.label}: startup failed: {self._describe(exc)}") from None
        self._started.append((each.label, manager))

    async def _stop_all(self) -> None:
        """Stop what started, the last first; each even when an earlier one failed."""
        while self._started:
            label, manager = self._started.pop()
            if not await self._stop(label, manager):
                log.error("%s: shutdown given up (second SIGINT)", label)

    async def _stop(self, label: str, manager: AbstractAsyncContextManager[object]) -> bool:
        """Run one close; False when it was given up (``abandon_stops``). A failure of the
        plugin's own is logged, never raised."""
        task = asyncio.current_task()
        abandoned = self._abandoned
        limit = asyncio.timeout(ABANDONED_CLOSE_SECONDS if abandoned else None)
        self._stopping = task
        try:
            async with limit:
                await manager.__aexit__(None, None, None)
        except asyncio.CancelledError as exc:
            if task is not None and task.cancelling():
                if abandoned or not self._abandoned:
                    raise  # we are cancelled: not the plugin's failure
                task.uncancel()  # abandon_stops cancelled this close: the next one goes on
                return False
            # The plugin's own slip (``task.cancel(); await task`` in its close).
            log.error("%s: shutdown failed: %s", label, self._describe(exc))
        except Exception as exc:
            if isinstance(exc, TimeoutError) and limit.expired():
                return False
            log.error("%s: shutdown failed: %s", label, self._describe(exc))
        finally:
            self._stopping = None
        return True


def _plain_generator(fn: object) -> bool:
    """``def`` with ``yield`` (``async`` forgotten), also under ``@contextmanager``: no start
    could enter it, so it is refused when registered (``config check`` names it too)."""
    wrapped = inspect.unwrap(fn) if callable(fn) else fn
    return inspect.isgeneratorfunction(fn) or inspect.isgeneratorfunction(wrapped)
