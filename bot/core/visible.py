"""Whether a text shows anything when a platform renders it (pure)."""

from __future__ import annotations

import unicodedata
from typing import Final

# Letters and symbols that render as blank space (Hangul fillers, the braille blank).
_BLANK_GLYPHS: Final = frozenset("\u115f\u1160\u2800\u3164\uffa0")
# Controls, format characters (zero-width space/joiners, word joiner, BOM), separators,
# and unassigned, private or surrogate code points.
_INVISIBLE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp", "Zs"})


def has_visible_text(text: str) -> bool:
    """True when at least one character of ``text`` renders as something other than blank."""
    return any(
        not ch.isspace()
        and ch not in _BLANK_GLYPHS
        and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES
        for ch in text
    )
