"""A plugin that holds a resource for the bots' lifetime: a journal file of every reply.

The file is opened when the bots start and closed when they stop (``@app.lifespan``,
docs/plugins.md#resources-lifespans); each recorded reply is one JSON line in it::

    plugins = ["personabot_extras.journal"]

    [plugin_options."personabot_extras.journal"]
    path = "replies.jsonl"
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO

import pydantic

from bot.app import App
from bot.core.errors import ConfigError
from bot.runtime.extensions import TurnContext


class JournalOptions(pydantic.BaseModel):
    """``[plugin_options."personabot_extras.journal"]``."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    path: Path = Path("replies.jsonl")


def setup(app: App) -> None:
    """Open the journal with the bots, write each recorded reply to it, close it at stop."""
    try:
        options = JournalOptions.model_validate(dict(app.options))
    except pydantic.ValidationError as exc:
        raise ConfigError([f"{e['loc'][0]}: {e['msg']}" for e in exc.errors()]) from None
    # Nothing is opened here: setup also runs for `config check`, which starts no bot.
    held: dict[str, TextIO] = {}

    @app.lifespan
    async def journal() -> AsyncIterator[None]:
        held["file"] = options.path.open("a", encoding="utf-8")
        try:
            yield
        finally:
            held.pop("file").close()  # written out, also after a later plugin failed to start

    @app.after_reply
    async def record(turn: TurnContext, reply: str) -> None:
        line = {"bot": turn.bot, "persona": turn.persona_id, "reply": reply}
        held["file"].write(json.dumps(line, ensure_ascii=False) + "\n")
