"""The model's Markdown as Telegram HTML, split into messages Telegram accepts.

Invariants:
- the HTML is well formed by construction: every piece of text is escaped, and every tag is
  opened and closed by the same call, so a chunk never ends inside a tag;
- only what Telegram allows nested is nested: emphasis may hold links, but neither emphasis nor
  links hold code (Telegram rejects ``<b><code>..</code></b>``);
- a reply is split on the Markdown source (paragraph, line, sentence, word; never inside a code
  block, see :mod:`adapters.text`), measuring each chunk's *rendered* HTML in UTF-16 code
  units, which is never shorter than the text Telegram counts; nothing is dropped.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Final

from adapters.text import Measure, split_text, utf16_len

#: Telegram's limit for one message, in UTF-16 code units after entity parsing.
MESSAGE_LIMIT: Final = 4096
#: What a preview shows in place of the start it had to cut.
ELLIPSIS: Final = "…"

_FENCE: Final = "```"
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(?=\S)")
# No tg: links: ``tg://user?id=N`` is a mention that notifies that person.
_LINK = re.compile(r"\[([^\[\]\n]+)\]\(((?:https?|mailto):[^\s()<>]+)\)")
# ``@name`` where Telegram would see a mention (not inside a word, such as an e-mail address).
# Every "@" not inside a word (an e-mail address): also "*@*name", which renders as "@name".
_MENTION = re.compile(r"(?<![^\W_])@")
_WORD_JOINER: Final = "\u2060"
_BARE_URL = re.compile(r"https?://[^\s<>()\[\]`*]*[^\s<>()\[\]`*.,;:!?'\"]")
_LANGUAGE = re.compile(r"^[\w+#.-]{1,32}$")
_SPECIAL = re.compile(r"[`*_~\[\\]|https?://")
# CommonMark's backslash escapes: a backslash before ASCII punctuation shows that character
# as written (bot/core/markup.literal escapes names and values the bot quotes this way).
_ESCAPABLE: Final = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_MAX_NESTING: Final = 3
_TAGS: Final = {"*": ("b", "i"), "_": ("b", "i"), "~": ("s", "s")}


@dataclass(frozen=True, slots=True)
class Chunk:
    """One Telegram message of a reply: its Markdown source and the HTML to send."""

    markdown: str
    html: str


def escape(text: str) -> str:
    """Escape text for Telegram HTML (``<``, ``>``, ``&``; quotes are harmless in text)."""
    return html.escape(text, quote=False)


def without_mentions(text: str) -> str:
    """``text`` that notifies nobody: an invisible word joiner after each mention's ``@``.

    Telegram has no "allowed mentions" switch: ``@username`` in a group notifies that person.
    The text still reads the same; only the mention entity is gone.
    """
    return _MENTION.sub("@" + _WORD_JOINER, text)


def split_message(markdown: str, limit: int = MESSAGE_LIMIT) -> list[Chunk]:
    """Split a reply into chunks whose rendered HTML fits ``limit`` UTF-16 code units."""
    parts = split_text(markdown, limit, measure=lambda part: utf16_len(render_html(part)))
    return [Chunk(part, render_html(part)) for part in parts]


def plain_chunks(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split text sent without formatting (the fallback) by its own UTF-16 length."""
    return split_text(text, limit, measure=utf16_len)


def html_tail(markdown: str, limit: int = MESSAGE_LIMIT) -> Chunk:
    """The end of ``markdown`` whose rendered HTML fits ``limit`` UTF-16 units (a streamed
    preview shows the latest words), "…" first when the start was cut."""
    part = tail(markdown, limit, lambda text: utf16_len(render_html(text)))
    return Chunk(part, render_html(part))


def tail(text: str, limit: int, measure: Measure = utf16_len) -> str:
    """The longest end of ``text`` with ``measure(end) <= limit``, starting at a word (at a
    character only when the last word alone is too long), "…" first when anything was cut.

    Cut inside a code block, the tail reopens the block's fence, so it still shows as code.
    The measure is assumed to grow with the text (true of rendered HTML, as good as true).
    """
    if measure(text) <= limit:
        return text
    # A suffix longer than the limit in characters is longer in UTF-16 units and in HTML.
    floor = max(0, len(text) - limit)
    words = [i for i in range(floor, len(text)) if _word_start(text, i)]
    found = _longest(text, words, limit, measure)
    if found is None:
        found = _longest(text, list(range(floor, len(text))), limit, measure)
    return "" if found is None else found


def _word_start(text: str, index: int) -> bool:
    return not text[index].isspace() and (index == 0 or text[index - 1].isspace())


def _longest(text: str, starts: list[int], limit: int, measure: Measure) -> str | None:
    """The cut tail from the earliest of ``starts`` (ascending) that fits (binary search)."""
    low, high, best = 0, len(starts) - 1, None
    while low <= high:
        middle = (low + high) // 2
        candidate = _cut_at(text, starts[middle])
        if measure(candidate) <= limit:
            best, high = candidate, middle - 1
        else:
            low = middle + 1
    return best


def _cut_at(text: str, start: int) -> str:
    """``text`` from ``start`` on, after "…" (and the open code fence, when cut inside one)."""
    fence = _open_fence(text[:start])
    if fence is None:
        return ELLIPSIS + text[start:]
    return f"{ELLIPSIS}\n{fence}\n{text[start:]}"


def _open_fence(before: str) -> str | None:
    """The fence line of a code block still open at the end of ``before`` (whole lines
    only), read as :func:`render_html` reads fences."""
    fence = None
    for line in before.split("\n")[:-1]:
        stripped = line.strip()
        if fence is None and stripped.startswith(_FENCE):
            fence = stripped
        elif fence is not None and stripped.startswith(_FENCE) and stripped.strip("`") == "":
            fence = None
    return fence


def render_html(markdown: str) -> str:
    """Render Markdown (bold, italic, strike, code, code blocks, links, headings) as HTML."""
    out: list[str] = []
    lines = markdown.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.strip().startswith(_FENCE):
            end = _fence_end(lines, index)
            out.append(_pre(line.strip()[3:].strip(), lines[index + 1 : end]))
            index = end + 1
            continue
        out.append(_render_line(line))
        index += 1
    return "\n".join(out)


def _fence_end(lines: list[str], start: int) -> int:
    """Index of the closing fence line (as :mod:`adapters.text` sees it), or past the end."""
    for index in range(start + 1, len(lines)):
        stripped = lines[index].strip()
        if stripped.startswith(_FENCE) and stripped.strip("`") == "":
            return index
    return len(lines)


def _pre(info: str, body: list[str]) -> str:
    code = escape("\n".join(body))
    language = info.split()[0] if info.split() else ""
    if _LANGUAGE.match(language):
        return f'<pre><code class="language-{escape(language)}">{code}</code></pre>'
    return f"<pre>{code}</pre>"


def _render_line(line: str) -> str:
    heading = _HEADING.match(line)
    if heading:
        return f"<b>{_Inline(heading[1], code=False).render()}</b>"
    bullet = _BULLET.match(line)
    if bullet:
        return f"{bullet[1]}• {_Inline(line[bullet.end() :]).render()}"
    return _Inline(line).render()


class _Inline:
    """Renders one line of inline Markdown; unmatched markers stay literal text."""

    def __init__(self, text: str, *, code: bool = True, links: bool = True) -> None:
        self._text = text
        self._code = code  # False inside emphasis and links: Telegram cannot nest code there
        self._links = links

    def render(self) -> str:
        """The line as Telegram HTML."""
        text, out, index = self._text, [], 0
        while index < len(text):
            match = _SPECIAL.search(text, index)
            if match is None:
                out.append(escape(text[index:]))
                break
            out.append(escape(text[index : match.start()]))
            index = match.start()
            rendered, index = self._token(index)
            out.append(rendered)
        return "".join(out)

    def _token(self, index: int) -> tuple[str, int]:
        """Render the construct starting at ``index``; return it and the index after it."""
        text = self._text
        char = text[index]
        end = _atom_end(text, index)
        if end is not None:
            return self._atom(text[index:end]), end
        if char in _TAGS:
            run = _run_length(text, index)
            emphasis = self._emphasis(index, run)
            if emphasis is not None:
                return emphasis
            return escape(text[index : index + run]), index + run
        return escape(char), index + 1

    def _atom(self, source: str) -> str:
        """A code span, a link, a bare URL or an escaped character: never searched for
        emphasis markers."""
        if source.startswith("\\"):
            return escape(source[1:])
        if source.startswith("`"):
            ticks = _run_length(source, 0)
            inner = source[ticks:-ticks]
            if len(inner) > 2 and inner[0] == inner[-1] == " " and inner.strip():
                inner = inner[1:-1]  # "`` `x` ``" shows "`x`", as in CommonMark
            return f"<code>{escape(inner)}</code>" if self._code else escape(inner)
        link = _LINK.fullmatch(source)
        if link is not None and self._links:
            label = _Inline(link[1], code=False, links=False).render()
            return f'<a href="{html.escape(link[2], quote=True)}">{label}</a>'
        return escape(source)

    def _emphasis(self, index: int, run: int) -> tuple[str, int] | None:
        """``**b**``, ``*i*``, ``__b__``, ``_i_``, ``~~s~~`` starting at ``index``."""
        text, char = self._text, self._text[index]
        if not _can_open(text, index, run):
            return None
        width = _width(char, run)
        closer = self._closer(char, width, index + run, depth=0)
        if closer is None:
            return None
        inner = _Inline(text[index + width : closer - width], code=False, links=self._links)
        tag = _TAGS[char][0 if width == 2 else 1]
        return f"<{tag}>{inner.render()}</{tag}>", closer

    def _closer(self, char: str, width: int, start: int, depth: int) -> int | None:
        """End of the run closing an opener, skipping code spans, links and nested pairs.

        The closer takes the last ``width`` characters of its run (``***x***`` is bold over
        italic). Nesting is followed a few levels deep only, which bounds the work per line.
        """
        text, index = self._text, start
        while index < len(text):
            end = _atom_end(text, index)
            if end is not None:
                index = end
                continue
            current = text[index]
            if current not in _TAGS:
                index += 1
                continue
            run = _run_length(text, index)
            stop = index + run
            if current == char and run >= width and _can_close(text, index, run):
                return stop
            if depth < _MAX_NESTING and _can_open(text, index, run):
                nested = self._closer(current, _width(current, run), stop, depth + 1)
                if nested is not None:
                    stop = nested
            index = stop
        return None


def _width(char: str, run: int) -> int:
    """How many marker characters an emphasis uses: 2 for bold and strike, 1 for italic."""
    return 2 if run >= 2 or char == "~" else 1


def _can_open(text: str, index: int, run: int) -> bool:
    """A marker run followed by text ("2 * 3" and snake_case stay literal)."""
    after = index + run
    if text[index] == "~" and run < 2:
        return False
    if after >= len(text) or text[after].isspace():
        return False
    return not (text[index] == "_" and index > 0 and text[index - 1].isalnum())


def _can_close(text: str, index: int, run: int) -> bool:
    """A marker run preceded by text (and, for ``_``, not followed by a letter)."""
    if index == 0 or text[index - 1].isspace():
        return False
    after = index + run
    return not (text[index] == "_" and after < len(text) and text[after].isalnum())


def _run_length(text: str, index: int) -> int:
    char, end = text[index], index
    while end < len(text) and text[end] == char:
        end += 1
    return end - index


def _atom_end(text: str, index: int) -> int | None:
    """End of a code span, link, bare URL or escaped character starting at ``index``; None
    if none starts there."""
    char = text[index]
    if char == "\\":
        escaped = index + 1 < len(text) and text[index + 1] in _ESCAPABLE
        return index + 2 if escaped else None
    if char == "`":
        ticks = _run_length(text, index)
        fence = "`" * ticks
        close = text.find(fence, index + ticks)
        while close != -1 and _run_length(text, close) != ticks:
            close = text.find(fence, close + _run_length(text, close))
        return None if close == -1 else close + ticks
    if char == "[":
        link = _LINK.match(text, index)
        return None if link is None else link.end()
    if char == "h":
        url = _BARE_URL.match(text, index)
        return None if url is None else url.end()
    return None
