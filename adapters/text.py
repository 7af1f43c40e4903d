"""Text rules shared by adapters: splitting long replies, cutting quoted messages.

Splitting, for platforms with a message size limit: split at paragraph, then line, then
sentence, then word boundaries; never inside a code block, unless the block alone is longer
than a message, in which case the block is cut at line boundaries and each part is closed and
reopened with the same fence; never truncate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

#: Quoted text is context, not a second copy of a long message (docs/architecture.md#media).
QUOTE_LIMIT: Final = 1000

Measure = Callable[[str], int]

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")


@dataclass(frozen=True, slots=True)
class _Block:
    text: str
    fence: str | None  # the opening fence line (e.g. "```python") of a code block


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, as Telegram counts message length."""
    return len(text.encode("utf-16-le")) // 2


def cut_quote(text: str) -> str:
    """``text`` within :data:`QUOTE_LIMIT` characters, an ellipsis marking the cut."""
    return text if len(text) <= QUOTE_LIMIT else text[: QUOTE_LIMIT - 1] + "…"


def split_text(text: str, limit: int, *, measure: Measure = len) -> list[str]:
    """Split ``text`` into chunks with ``measure(chunk) <= limit``, losing nothing."""
    if limit < 16:
        raise ValueError("limit too small to split safely")
    text = text.strip("\n")
    if measure(text) <= limit:
        return [text] if text else []
    packer = _Packer(limit, measure)
    for block in _blocks(text):
        if block.fence is not None:
            packer.add_code(block)
        else:
            for paragraph in re.split(r"\n{2,}", block.text.strip("\n")):
                if paragraph.strip():
                    packer.add(paragraph, "\n\n", _prose_levels())
    return packer.finish()


def _blocks(text: str) -> Iterator[_Block]:
    """Prose and fenced code blocks in order (an unclosed fence runs to the end)."""
    prose: list[str] = []
    code: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            if prose:
                yield _Block("\n".join(prose), None)
                prose = []
            fence, code = stripped, [line]
        elif fence is not None:
            code.append(line)
            if stripped.startswith("```") and stripped.strip("`") == "" and len(code) > 1:
                yield _Block("\n".join(code), fence)
                fence, code = None, []
        else:
            prose.append(line)
    if fence is not None:
        code.append("```")  # close an unterminated block so every chunk stays balanced
        yield _Block("\n".join(code), fence)
    elif prose:
        yield _Block("\n".join(prose), None)


def _prose_levels() -> list[tuple[Callable[[str], list[str]], str]]:
    """Ever finer ways to cut prose, with the separator that joins the pieces back."""
    return [
        (lambda s: s.split("\n"), "\n"),
        (lambda s: _SENTENCE_END.split(s), " "),
        (lambda s: s.split(" "), " "),
    ]


class _Packer:
    """Greedily packs pieces into chunks that fit."""

    def __init__(self, limit: int, measure: Measure) -> None:
        self._limit = limit
        self._measure = measure
        self._chunks: list[str] = []
        self._current = ""

    def _fits(self, text: str) -> bool:
        return self._measure(text) <= self._limit

    def _flush(self) -> None:
        if self._current.strip():
            self._chunks.append(self._current)
        self._current = ""

    def add(
        self, piece: str, sep: str, levels: list[tuple[Callable[[str], list[str]], str]]
    ) -> None:
        """Append a piece, cutting it finer when it cannot fit in a chunk of its own."""
        candidate = f"{self._current}{sep}{piece}" if self._current else piece
        if self._fits(candidate):
            self._current = candidate
            return
        self._flush()
        if self._fits(piece):
            self._current = piece
            return
        if not levels:
            self._hard_cut(piece)
            return
        cut, inner_sep = levels[0]
        parts = [p for p in cut(piece) if p != ""] or [piece]
        if len(parts) == 1:
            self.add(piece, sep, levels[1:])
            return
        for part in parts:
            self.add(part, inner_sep, levels[1:])

    def _hard_cut(self, piece: str) -> None:
        """A single word longer than a message: cut it by characters."""
        start = 0
        while start < len(piece):
            end = len(piece)
            while end > start + 1 and not self._fits(piece[start:end]):
                end = start + max(1, (end - start) * 3 // 4)
            self._chunks.append(piece[start:end])
            start = end

    def add_code(self, block: _Block) -> None:
        """Keep a code block whole; if it cannot fit in one message, reopen the fence."""
        candidate = f"{self._current}\n\n{block.text}" if self._current else block.text
        if self._fits(candidate):
            self._current = candidate
            return
        self._flush()
        if self._fits(block.text):
            self._current = block.text
            return
        assert block.fence is not None
        lines = block.text.split("\n")[1:-1]  # without the fence lines
        opening, closing = block.fence, "```"
        part: list[str] = []
        for line in lines:
            trial = "\n".join([opening, *part, line, closing])
            if part and not self._fits(trial):
                self._chunks.append("\n".join([opening, *part, closing]))
                part = []
            if not self._fits("\n".join([opening, line, closing])):
                for piece in self._cut_line(line, opening, closing):
                    self._chunks.append("\n".join([opening, piece, closing]))
                continue
            part.append(line)
        if part:
            self._current = "\n".join([opening, *part, closing])

    def _cut_line(self, line: str, opening: str, closing: str) -> list[str]:
        pieces, start = [], 0
        while start < len(line):
            end = len(line)
            while end > start + 1 and not self._fits(
                "\n".join([opening, line[start:end], closing])
            ):
                end = start + max(1, (end - start) * 3 // 4)
            pieces.append(line[start:end])
            start = end
        return pieces

    def finish(self) -> list[str]:
        """The chunks, in order."""
        self._flush()
        return self._chunks
