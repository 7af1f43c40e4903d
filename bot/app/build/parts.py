"""What the runtime's builders share once the store is open (bot/app/build/runtime.py)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.app.build.policies import Hosted
from bot.config import Settings
from bot.core.clock import Clock
from bot.core.llm import BaseLLM
from bot.metrics import Metrics
from bot.runtime.voice import Voices
from bot.store.base import BaseStore


@dataclass(frozen=True, slots=True)
class Parts:
    """The settings, the hosted bots' rules, the open store, the model and the clocks."""

    settings: Settings
    hosted: Hosted
    store: BaseStore
    llm: BaseLLM
    #: The runtime's clock: schedulers, ingest, commands, the health checks.
    clock: Clock
    #: The clock of turns, memory, limits and exports (a test may hold it apart).
    turn_clock: Clock
    metrics: Metrics
    #: This process's name in leases.
    holder: str
    #: The personas' voices (docs/voices.md; None: no persona speaks).
    voices: Voices | None = None
