"""A strict reader of the prompts personabot builds: blocks, transcript lines, turn parts.

It reads the prompt the way a careful model would: any occurrence of a tag opens or closes a
block, and every line boundary Python knows (``str.splitlines``) starts a new line. It raises
``Malformed`` when the text does not have exactly the expected shape, so a value that smuggles
a tag or a line header in shows up as a parse failure or as an extra block or line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

SYSTEM_TAGS = ("user_memory", "conversation_summary", "gap_notice")
_HEADER = re.compile(r'^("(?:[^"\\]|\\.)*") \(user ("(?:[^"\\]|\\.)*")\):$')
_SUMMARY_HEADER = re.compile(r"^Summary of turns (-?\d+)-(-?\d+) of this conversation, as JSON:$")
_PERSON = re.compile(r'^<messages_of person=("(?:[^"\\]|\\.)*")>$')


class Malformed(AssertionError):
    """The text does not have the shape the prompt builder promises."""


@dataclass(frozen=True, slots=True)
class Block:
    """One tagged block of the system prompt: its tag and the lines inside it."""

    tag: str
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Part:
    """One author's part of a group turn."""

    name: str
    user_id: str
    lines: tuple[str, ...]


def _count_tags(text: str, names: tuple[str, ...]) -> dict[str, int]:
    return {n: text.count(f"<{n}>") + text.count(f"</{n}>") for n in names}


def system_blocks(texts: list[str], pin: str, note: str) -> list[Block]:
    """The tagged blocks after the pin; the data note must come first, exactly once."""
    if not texts or texts[0] != pin:
        raise Malformed("the first system block is not the persona pin")
    rest = "\n".join(texts[1:])
    if not rest:
        return []
    # A copy of the note inside a value is harmless (it is inside a JSON string); what
    # matters is that the note comes first and everything after it is blocks.
    has_note = rest.startswith(note + "\n")
    lines = rest[len(note) + 1 :].splitlines() if has_note else rest.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = re.fullmatch(r"<(\w+)>", lines[i])
        if opening is None or opening[1] not in SYSTEM_TAGS:
            raise Malformed(f"expected a block to open, got {lines[i]!r}")
        tag = opening[1]
        try:
            end = lines.index(f"</{tag}>", i + 1)
        except ValueError:
            raise Malformed(f"block {tag} is never closed") from None
        inner = tuple(lines[i + 1 : end])
        if any("<" in line or ">" in line for line in inner):
            raise Malformed(f"angle brackets inside block {tag}")
        blocks.append(Block(tag, inner))
        i = end + 1
    if has_note != any(b.tag != "gap_notice" for b in blocks):
        raise Malformed("the data note must come with the memory or the summary, only then")
    found = _count_tags(rest, SYSTEM_TAGS)
    expected = {n: 2 * sum(b.tag == n for b in blocks) for n in SYSTEM_TAGS}
    if found != expected:
        raise Malformed(f"stray block tags: {found} != {expected}")
    return blocks


def json_line(line: str) -> Any:
    """One JSON value that fills the whole line."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise Malformed(f"not a JSON line: {line!r}") from exc


def memory_people(block: Block, header: str) -> list[dict[str, Any]]:
    """The per-person JSON objects of a ``<user_memory>`` block."""
    if not block.lines or block.lines[0] != header:
        raise Malformed("the memory block does not start with its header")
    return [json_line(line) for line in block.lines[1:]]


def summary_body(block: Block) -> tuple[int, int, dict[str, list[str]]]:
    """Turn range and fields of a ``<conversation_summary>`` block."""
    if len(block.lines) != 2:
        raise Malformed(f"the summary has {len(block.lines)} lines, not 2")
    header = _SUMMARY_HEADER.match(block.lines[0])
    if header is None:
        raise Malformed("the summary does not start with its header")
    return int(header[1]), int(header[2]), json_line(block.lines[1])


def tagged_sections(text: str, names: tuple[str, ...]) -> dict[str, list[str]]:
    """A task request: each named section, in this order, with its lines; nothing else."""
    if _count_tags(text, names) != {n: 2 for n in names}:
        raise Malformed(f"tags do not occur exactly once each: {_count_tags(text, names)}")
    lines = text.splitlines()
    out: dict[str, list[str]] = {}
    i = 0
    for name in names:
        if i >= len(lines) or lines[i] != f"<{name}>":
            raise Malformed(f"expected <{name}>")
        end = lines.index(f"</{name}>", i + 1)
        out[name] = lines[i + 1 : end]
        i = end + 1
    if i != len(lines):
        raise Malformed("text after the last section")
    return out


def extraction_lines(text: str) -> tuple[str, list[Any]]:
    """The person named by an extraction request and its JSON message lines."""
    lines = text.splitlines()
    if text.count("<messages_of") != 1 or text.count("</messages_of>") != 1:
        raise Malformed("messages_of tags do not occur exactly once")
    person = _PERSON.match(lines[0]) if lines else None
    if person is None or lines[-1] != "</messages_of>":
        raise Malformed("not a messages_of block")
    return json_line(person[1]), [json_line(line) for line in lines[1:-1]]


def turn_parts(text: str) -> list[Part]:
    """The author parts of a group turn: header lines at the margin, indented message lines."""
    parts: list[Part] = []
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("  "):
            if not parts:
                raise Malformed("message text before the first header")
            lines.append(line[2:])
            continue
        header = _HEADER.match(line)
        if header is None:
            raise Malformed(f"a line at the margin that is not a header: {line!r}")
        if parts:
            parts[-1] = Part(parts[-1].name, parts[-1].user_id, tuple(lines))
        parts.append(Part(json_line(header[1]), json_line(header[2]), ()))
        lines = []
    if parts:
        parts[-1] = Part(parts[-1].name, parts[-1].user_id, tuple(lines))
    return parts
