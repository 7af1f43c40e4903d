"""An example personabot plugin: a /roll command, a current_time tool, a filter middleware.

Load it from the TOML (with ``examples/`` on ``PYTHONPATH``, or the package installed)::

    plugins = ["personabot_dice"]

    [plugin_options.personabot_dice]
    drop_pattern = "(?i)buy now"    # messages matching it are never stored or answered
    max_dice = 10
"""

from __future__ import annotations

import datetime
import random
import re

import pydantic

from bot.app import App
from bot.core.errors import ConfigError
from bot.core.events import Inbound
from bot.runtime.extensions import CallNext, Command

_DICE = re.compile(r"^\s*(?P<count>\d{1,3})?d(?P<sides>\d{1,4})\s*$", re.I)


class DiceOptions(pydantic.BaseModel):
    """``[plugin_options.personabot_dice]``."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    drop_pattern: str | None = None
    max_dice: int = pydantic.Field(default=10, ge=1, le=100)


def setup(app: App) -> None:
    """Register /roll, the current_time tool and (when configured) the filter."""
    try:
        options = DiceOptions.model_validate(dict(app.options))
    except pydantic.ValidationError as exc:
        raise ConfigError(
            [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        ) from None
    try:
        dropped = re.compile(options.drop_pattern) if options.drop_pattern else None
    except re.error as exc:
        raise ConfigError([f"drop_pattern: not a regular expression ({exc})"]) from None
    rng = random.SystemRandom()

    @app.command("roll", help="roll dice: /roll, /roll d20, /roll 3d6")
    async def roll(event: Inbound, command: Command) -> str:
        match = _DICE.match(command.args or "d6")
        if match is None:
            return "Try /roll d20 or /roll 3d6."
        count, sides = int(match["count"] or 1), int(match["sides"])
        if not 1 <= count <= options.max_dice or sides < 2:
            return f"I roll 1 to {options.max_dice} dice of at least 2 sides."
        rolls = [rng.randint(1, sides) for _ in range(count)]
        shown = " + ".join(map(str, rolls))
        return f"🎲 {shown} = {sum(rolls)}" if count > 1 else f"🎲 {rolls[0]}"

    @app.tool
    async def current_time(utc_offset_hours: float = 0.0) -> str:
        """The current date and time at a UTC offset (hours), as ISO 8601."""
        zone = datetime.timezone(datetime.timedelta(hours=max(-14.0, min(14.0, utc_offset_hours))))
        return datetime.datetime.now(zone).isoformat(timespec="minutes")

    if dropped is not None:

        @app.middleware
        async def drop_matching(event: Inbound, call_next: CallNext) -> None:
            if event.kind != "delete" and dropped.search(event.text):
                return  # dropped: never stored, never answered
            await call_next(event)
