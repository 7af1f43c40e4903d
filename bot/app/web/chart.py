"""The overview's chart of the last 24 hours, drawn on the server as an inline SVG
(docs/web.md): one bar per clock hour (UTC), hour labels on the axis, the top of the scale
on the other, each bar's values in its ``<title>`` (shown on hover). No script, no CDN."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

#: The drawing's size (SVG user units) and the plot area inside it.
WIDTH: Final = 760
HEIGHT: Final = 200
LEFT, RIGHT, TOP, BOTTOM = 64, 752, 12, 160
#: An hour label under every third bar (eight labels: they never touch).
LABEL_EVERY: Final = 3


@dataclass(frozen=True, slots=True)
class Bar:
    """One hour's bar."""

    x: float
    y: float
    width: float
    height: float
    title: str  # the hover text: the hour and its values


@dataclass(frozen=True, slots=True)
class Tick:
    """A label on an axis, at ``(x, y)``."""

    x: float
    y: float
    text: str


@dataclass(frozen=True, slots=True)
class Chart:
    """What the template draws."""

    bars: tuple[Bar, ...]
    hours: tuple[Tick, ...]  # under the bars
    scale: tuple[Tick, ...]  # beside them: 0 and the top
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = RIGHT
    top: int = TOP
    bottom: int = BOTTOM


def hour_label(start: float) -> str:
    """``14:00`` for the hour starting at ``start`` (UTC)."""
    return datetime.fromtimestamp(start, UTC).strftime("%H:00")


def chart(hours: Sequence[Mapping[str, Any]]) -> Chart:
    """The bars of ``hours`` (each with ``start``, ``tokens``, ``replies``, ``calls``),
    scaled to the busiest one."""
    top = max((int(h["tokens"]) for h in hours), default=0)
    slot = (RIGHT - LEFT) / max(1, len(hours))
    room = BOTTOM - TOP
    bars, labels = [], []
    for i, h in enumerate(hours):
        height = room * int(h["tokens"]) / top if top else 0.0
        x = LEFT + i * slot
        title = (
            f"{hour_label(h['start'])} UTC: {h['tokens']} tokens, {h['replies']} replies, "
            f"{h['calls']} model calls"
        )
        bars.append(Bar(round(x + slot * 0.15, 1), round(BOTTOM - height, 1),
                        round(slot * 0.7, 1), round(height, 1), title))  # fmt: skip
        if i % LABEL_EVERY == 0:
            labels.append(Tick(round(x + slot / 2, 1), BOTTOM + 18, hour_label(h["start"])))
    scale = (Tick(LEFT - 6, BOTTOM, "0"), Tick(LEFT - 6, TOP + 10, _short(top)))
    return Chart(tuple(bars), tuple(labels), scale)


def _short(tokens: int) -> str:
    """12345 -> ``12.3k``: the top of the scale in a few characters."""
    if tokens >= 1_000_000:
        return f"{tokens / 1_000_000:.1f}M"
    if tokens >= 1_000:
        return f"{tokens / 1_000:.1f}k"
    return str(tokens)
