"""The environment a test gives a child process it starts (``personabot``, a bot, a script)."""

from __future__ import annotations

import os
from typing import Final

#: Names that would configure the child from outside the test: the developer's own API key
#: and settings overrides. A test that sets one passes it in ``extra``.
DROPPED: Final = ("ANTHROPIC_", "PERSONABOT_")


def clean_env(*, drop: tuple[str, ...] = DROPPED, **extra: str) -> dict[str, str]:
    """This process's environment without the variables whose names start with one of ``drop``,
    plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env
