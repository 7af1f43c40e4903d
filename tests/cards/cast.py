"""The wired runtime of ``tests/harness.py`` for a bot with several personas (a ``[[bots]]``
entry with ``personas = [...]``, as the TOML would give it), on the manual clock."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from bot.app import App
from bot.app.build import Seams
from bot.config import PersonaSettings, ScheduleSettings, Secrets, TelegramBotSettings
from bot.core.clock import ManualClock
from bot.core.llm import BaseLLM
from bot.store.base import BaseStore
from memory.service import MemoryPolicy
from tests.fakes.outlet import RecordingOutlet
from tests.harness import BOT, SHARED_STORES, Harness, harness_settings


def persona(pid: str, name: str, **fields: object) -> PersonaSettings:
    """A validated persona (as the TOML loader would build it)."""
    values: dict[str, object] = {
        "id": pid,
        "name": name,
        "system": f"You are {name}.",
        "first_message": [f"Hi, I'm {name}."],
        "model": f"model-{pid}",
    }
    values.update(fields)
    return PersonaSettings.model_validate(values)


@contextlib.asynccontextmanager
async def cast(
    store: BaseStore,
    clock: ManualClock,
    llm: BaseLLM,
    personas: Sequence[PersonaSettings],
    *,
    on_bot: Sequence[str] | None = None,
    memory_policy: MemoryPolicy | None = None,
    schedule: ScheduleSettings | None = None,
    debounce: float = 1.5,
) -> AsyncIterator[Harness]:
    """One bot (key ``BOT``) that may speak as ``on_bot`` (default: every persona, the first
    the default); the configuration holds all of ``personas``."""
    default = personas[0]
    settings = harness_settings(
        persona=default,
        schedule=schedule,
        debounce=debounce,
        max_wait=8.0,
        lease=30.0,
        memory_policy=memory_policy,
        gap_policy=None,
        access=None,
        limits=None,
        trouble_notice="",
        forget_deletes_messages=False,
        export_every=600.0,
    )
    ids = list(on_bot) if on_bot is not None else [p.id for p in personas]
    entry = TelegramBotSettings.model_construct(
        id=BOT, platform="telegram", persona="", personas=ids, token_env="TG_TOKEN"
    )
    settings = settings.model_copy(update={"personas": list(personas), "bots": [entry]})
    outlet = RecordingOutlet(clock)
    app = App(settings, Secrets({}), clock=clock, llm=llm)
    seams = Seams(background=False)
    async with app.running({BOT: (default, outlet)}, store=store, seams=seams) as rt:
        assert rt.ingestor is not None and rt.memory is not None and rt.exports is not None
        SHARED_STORES.append(store)
        try:
            yield Harness(
                store,
                clock,
                llm,
                outlet,
                rt.pipeline,
                rt.scheduler,
                rt.router,
                rt.ingestor,
                rt.memory,
                rt.exports,
                agenda=rt.agenda,
            )
        finally:
            SHARED_STORES.remove(store)
