"""Text made safe to print on a terminal (pure)."""

from __future__ import annotations

from typing import Final

#: Bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069): shown in their place,
#: they reorder what follows on the line ("Trojan Source"), so a name or a reply could show
#: text other than what it holds.
_BIDI: Final = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
#: C0 controls but newline and tab, DEL, C1 controls: written raw they are escape sequences
#: (ESC starts them, and C1 CSI/OSC are one byte in some terminals) that can set the window
#: title, write the clipboard (OSC 52), clear the screen or hide a link's target (OSC 8).
_CONTROLS: Final = (*(c for c in range(0x20) if c not in (0x09, 0x0A)), *range(0x7F, 0xA0))
_TABLE: Final[dict[int, str]] = {c: f"\\x{c:02x}" for c in _CONTROLS} | {
    c: f"<U+{c:04X}>" for c in _BIDI
}


def safe_for_terminal(text: str) -> str:
    """``text`` with every control character (but newline and tab) and every bidi override or
    isolate shown as a visible escape (``\\x1b``, ``<U+202E>``), so printing it cannot drive
    the terminal. Character by character: the parts of a text come out as its whole does."""
    return text.translate(_TABLE)
