"""Text made safe for a terminal: no control character or bidi override gets through raw."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from bot.core.terminal import safe_for_terminal

BIDI = {*map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}


def test_escape_sequences_and_bidi_overrides_are_shown_not_sent() -> None:
    """OSC 52 (clipboard), CSI (clear screen), a one-byte C1 CSI, a carriage return that
    would overwrite the line and a right-to-left override all come out as visible text."""
    text = "a\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b31m\rfake\u202eevil\x7f"
    assert safe_for_terminal(text) == (
        "a\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J\\x9b31m\\x0dfake<U+202E>evil\\x7f"
    )


def test_ordinary_text_newlines_and_tabs_are_kept() -> None:
    """What a persona writes in any language (and its layout) is printed as it is."""
    text = "Hi, I'm Mira.\n\tПривет — こんにちは 👋 مرحبا"
    assert safe_for_terminal(text) == text


@given(st.text(), st.text())
def test_nothing_unsafe_survives_and_parts_come_out_as_the_whole(a: str, b: str) -> None:
    """A streamed reply is printed piece by piece: the pieces must match the whole."""
    safe = safe_for_terminal(a + b)
    assert safe == safe_for_terminal(a) + safe_for_terminal(b)
    assert not any(
        (unicodedata.category(ch) == "Cc" and ch not in "\n\t") or ch in BIDI for ch in safe
    )
