"""The services every turn uses: spending limits and accounting, media, memory, retention."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from bot.app.build import stores
from bot.app.build.memory import memory_on
from bot.app.build.parts import Parts
from bot.app.build.policies import (
    Hosted,
    limit_policy,
    memory_policy,
    prices,
    retention_policy,
    scene_rules,
)
from bot.config import Settings
from bot.core.clock import Clock, SystemClock
from bot.core.llm import BaseLLM
from bot.core.media import MediaSource, Transcriber
from bot.core.ports import Outlet
from bot.llm.offline import OfflineLLM
from bot.metrics import Metrics
from bot.runtime.limits import Limits
from bot.runtime.media import MediaPreparer, MediaSettings
from bot.runtime.usage import Accounting
from bot.store.base import BaseStore
from memory.retention.worker import Retention
from memory.service import Memory, MemoryPolicy


def build_metrics(settings: Settings, hosted: Hosted) -> Metrics:
    """The process's metrics, labelled by each bot's persona (never by user)."""
    return Metrics(
        personas={key: persona.id for key, (persona, _) in hosted.bots.items()},
        prices=prices(settings),
    )


@dataclass(frozen=True, slots=True)
class Spending:
    """The per-person and per-bot limits, and the accounting that charges against them."""

    limits: Limits
    accounting: Accounting


def build_spending(
    settings: Settings, store: BaseStore, clock: Clock, hosted: Hosted, metrics: Metrics
) -> Spending:
    """Replies and memory tasks are charged and limited alike, on the turn clock."""
    limits = Limits(
        store=store,
        clock=clock,
        policy=limit_policy(settings),
        is_admin=hosted.is_admin,
        languages=hosted.languages,
    )
    return Spending(limits, Accounting(store=store, clock=clock, metrics=metrics, limits=limits))


def media_source(outlet: object) -> MediaSource | None:
    """The adapter's way to fetch the media it received (its ``media``), if it has one."""
    source = getattr(outlet, "media", None)
    return source if callable(getattr(source, "fetch", None)) else None


def build_media(
    settings: Settings,
    store: BaseStore,
    clock: Clock,
    outlets: Mapping[str, Outlet],
    *,
    transcriber: Transcriber | None,
    metrics: Metrics | None = None,
) -> MediaPreparer:
    """Fetching, downscaling and transcribing of each turn's media (bot/runtime/media.py)."""
    media = settings.media
    return MediaPreparer(
        store=store,
        sources=lambda bot: media_source(outlets.get(bot)),
        settings=MediaSettings(
            max_download_bytes=int(media.max_download_mb * 1024 * 1024),
            fetch_timeout_seconds=media.fetch_timeout_seconds,
            transcribe_max_seconds=settings.transcription.max_seconds,
            transcribe_timeout_seconds=settings.transcription.timeout_seconds,
        ),
        clock=clock,
        transcriber=transcriber,
        metrics=metrics,
    )


def build_memory(
    settings: Settings,
    store: BaseStore,
    llm: BaseLLM,
    clock: Clock,
    *,
    policy_for: Callable[[str], MemoryPolicy] | None = None,
    account: Accounting | None = None,
    media: MediaPreparer | None = None,
) -> Memory:
    """The memory service; by default each bot's policy from its persona (the first
    persona's for a bot not in ``[[bots]]``, e.g. the console)."""
    if policy_for is None:
        by_bot = {
            b.key: memory_policy(
                settings, settings.persona(b.default_persona), scene_rules(settings, b)
            )
            for b in settings.bots
        }
        default = memory_policy(settings, settings.persona(None))

        def policy_for(bot: str) -> MemoryPolicy:
            return by_bot.get(bot, default)

    return memory_on(
        store, llm=llm, clock=clock, policy_for=policy_for, account=account, media=media
    )


@contextlib.asynccontextmanager
async def open_memory(
    settings: Settings,
    llm: BaseLLM | None = None,
    clock: Clock | None = None,
    *,
    policy_for: Callable[[str], MemoryPolicy] | None = None,
) -> AsyncIterator[tuple[BaseStore, Memory]]:
    """The configured store and a memory service on it alone (no queue, no turns): for the
    admin commands and the console's own connection."""
    async with stores.build_store(settings) as store:
        memory = build_memory(
            settings, store, llm or OfflineLLM(), clock or SystemClock(), policy_for=policy_for
        )
        yield store, memory


def build_services(
    parts: Parts, memory_llm: BaseLLM, transcriber: Transcriber | None
) -> tuple[Spending, Memory]:
    """The limits and accounting, and memory (with the turns' media) on the turn clock, each
    bot by its own profile's policy; ``memory_llm`` writes summaries and memory."""
    clock, hosted = parts.turn_clock, parts.hosted
    spending = build_spending(parts.settings, parts.store, clock, hosted, parts.metrics)
    media = build_media(
        parts.settings,
        parts.store,
        clock,
        hosted.outlets,
        transcriber=transcriber,
        metrics=parts.metrics,
    )
    memory = build_memory(
        parts.settings,
        parts.store,
        memory_llm,
        clock,
        policy_for=lambda bot: hosted.profile_of(bot).memory,
        account=spending.accounting,
        media=media,
    )
    return spending, memory


def build_retention(
    settings: Settings,
    store: BaseStore,
    memory: Memory,
    clock: Clock,
    metrics: Metrics | None = None,
) -> Retention:
    """The retention worker of [retention]."""
    return Retention(
        store=store,
        memory=memory,
        clock=clock,
        policy=retention_policy(settings),
        metrics=metrics,
    )
