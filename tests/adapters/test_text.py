"""Splitting long replies: within the limit, code blocks intact, nothing lost."""

from __future__ import annotations

import re

import pytest

from adapters.text import split_text, utf16_len


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"\s+", text.replace("```python", "").replace("```", "")) if w]


def test_short_text_is_one_chunk() -> None:
    assert split_text("hello", 2000) == ["hello"]


def test_paragraphs_are_kept_whole_when_possible() -> None:
    paras = [f"Paragraph {i}. " + "word " * 60 for i in range(10)]
    text = "\n\n".join(p.strip() for p in paras)
    chunks = split_text(text, 1000)
    assert all(len(c) <= 1000 for c in chunks)
    assert all(c.startswith("Paragraph") for c in chunks)
    assert _words("".join(c + " " for c in chunks)) == _words(text)


def test_code_block_is_never_split_when_it_fits_a_message() -> None:
    code = "```python\n" + "\n".join(f"x{i} = {i}" for i in range(100)) + "\n```"
    text = "Intro " * 200 + "\n\n" + code + "\n\n" + "Outro " * 200
    chunks = split_text(text, 2000)
    assert all(len(c) <= 2000 for c in chunks)
    assert code in chunks[1]  # whole, in one message
    assert _words(" ".join(chunks)) == _words(text)


def test_long_code_block_is_closed_and_reopened() -> None:
    code = "```python\n" + "\n".join(f"line_{i} = 'value {i}'" for i in range(400)) + "\n```"
    chunks = split_text("Here:\n\n" + code, 2000)
    assert len(chunks) >= 4
    for chunk in chunks:
        assert len(chunk) <= 2000
        assert chunk.count("```") % 2 == 0  # fences balanced in every message
    body = [ln for c in chunks for ln in c.split("\n") if ln.startswith("line_")]
    assert body == [f"line_{i} = 'value {i}'" for i in range(400)]
    assert all(c.startswith("```python") for c in chunks[1:])


def test_sentences_then_words_then_characters() -> None:
    sentence = "This is a sentence that goes on. "
    text = sentence * 200 + "x" * 5000
    chunks = split_text(text, 500)
    assert all(len(c) <= 500 for c in chunks)
    assert "".join(chunks).replace(" ", "") == text.strip().replace(" ", "")


@pytest.mark.parametrize("limit", [4096])
def test_utf16_measure(limit: int) -> None:
    text = "😀 " * 3000  # each emoji is two UTF-16 units
    chunks = split_text(text, limit, measure=utf16_len)
    assert all(utf16_len(c) <= limit for c in chunks)
    assert sum(c.count("😀") for c in chunks) == 3000
