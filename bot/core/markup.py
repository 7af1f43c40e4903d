"""Text the bot quotes inside its own Markdown answers, shown as written.

Replies and the bot's answers are Markdown: Telegram's adapter renders them
(adapters/telegram/format.py), Discord renders them itself. A value the bot did not write
(a persona's name from the operator's TOML) can hold ``*`` or ``_``; quoted raw, "*Co*" would
show as an italic "Co" in a listing while its button (plain text) shows "*Co*". Escaped with
CommonMark's backslash escapes, both platforms show it as written; the console and the
playground show the Markdown source as they do for every reply.
"""

from __future__ import annotations

import re
from typing import Final

# The characters that open Markdown constructs in either renderer (emphasis, strike, code,
# links, spoilers, block quotes and headings at a line's start), and the backslash itself.
_MARKUP: Final = re.compile(r"([\\`*_~\[\]|>#])")
# A list bullet at a line's start ("- x" would show as "• x").
_BULLET: Final = re.compile(r"^(\s*)([-+])", re.MULTILINE)


def literal(text: str) -> str:
    """``text`` escaped so that a Markdown renderer shows it exactly as written."""
    return _BULLET.sub(r"\1\\\2", _MARKUP.sub(r"\\\1", text))
