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

    def add(self, label: str, fn: Lifespan) -> None:
        """Register ``fn`` for the plugin ``label``; ConfigError when it is neither form."""
        if inspect.isasyncgenfunction(fn):
            made: Callable[[], AbstractAsyncContextManager[object]] = (
                contextlib.asynccontextmanager(fn)
            )
        elif callable(fn) and not inspect.iscoroutinefunction(fn):
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
            try:
                await manager.__aexit__(None, None, None)
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # we are cancelled: not the plugin's failure
                # The plugin's own slip (``task.cancel(); await task`` in its close).
                log.error("%s: shutdown failed: %s", label, self._describe(exc))
            except Exception as exc:
                log.error("%s: shutdown failed: %s", label, self._describe(exc))
