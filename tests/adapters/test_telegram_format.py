"""Markdown -> Telegram HTML and splitting, checked with the fake server's own HTML parser."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from adapters.telegram.format import (
    MESSAGE_LIMIT,
    plain_chunks,
    render_html,
    split_message,
    without_mentions,
)
from adapters.text import utf16_len
from bot.core.markup import literal
from tests.fakes.telegram_api import EntityParseError, parse_telegram_html


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("**bold** and __bold__", "<b>bold</b> and <b>bold</b>"),
        ("*italic* and _italic_", "<i>italic</i> and <i>italic</i>"),
        ("~~gone~~", "<s>gone</s>"),
        ("use `a<b>` here", "use <code>a&lt;b&gt;</code> here"),
        ("[docs](https://x.org/a_b?q=1&r=2)", '<a href="https://x.org/a_b?q=1&amp;r=2">docs</a>'),
        ("***both***", "<b><i>both</i></b>"),
        ("*a **b** c*", "<i>a <b>b</b> c</i>"),
        ("# Title", "<b>Title</b>"),
        ("- one\n* two", "• one\n• two"),
        ("```python\nif a < b:\n    pass\n```", None),
        # Everything else is text, escaped: no tag of the model's survives.
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("<b>not a tag</b>", "&lt;b&gt;not a tag&lt;/b&gt;"),
        ("2 * 3 * 4", "2 * 3 * 4"),
        ("snake_case_name", "snake_case_name"),
        ("**unbalanced and *lonely", "**unbalanced and *lonely"),
        ("see https://example.com/_x_/y_z_ now", "see https://example.com/_x_/y_z_ now"),
        # Telegram cannot nest code inside bold: the code's text stays, the tag goes.
        ("**run `ls` now**", "<b>run ls now</b>"),
    ],
)
def test_markdown_renders_to_telegram_html(markdown: str, html: str | None) -> None:
    rendered = render_html(markdown)
    if html is not None:
        assert rendered == html
    parse_telegram_html(rendered)  # what Telegram would accept


def test_code_block_keeps_its_language_and_text() -> None:
    rendered = render_html("```python\nif a < b:\n    return '&'\n```")
    assert rendered == (
        "<pre><code class=\"language-python\">if a &lt; b:\n    return '&amp;'</code></pre>"
    )
    assert parse_telegram_html(rendered) == "if a < b:\n    return '&'"


def test_rendered_html_is_always_accepted_by_telegram() -> None:
    """Fuzz with the characters that break naive renderers: every output must parse."""
    alphabet = ["*", "**", "_", "__", "~~", "`", "```", "[", "](", ")", "http://a.b/_c", "<", ">"]
    alphabet += ["&", "&amp;", "a", "b c", " ", "\n", "\n\n", "# ", "- ", "😀", "\\"]
    rng = random.Random(6)
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        rendered = render_html(text)
        try:
            parse_telegram_html(rendered)
        except EntityParseError as exc:  # pragma: no cover - the failure message
            pytest.fail(f"{text!r} -> {rendered!r}: {exc}")


def _nine_thousand_with_code() -> tuple[str, str]:
    paragraph = (
        "This paragraph talks about *mugs* & <cups>, and it goes on for a while so that the "
        "reply is long enough to need splitting. It has sentences. Many of them! "
    ) * 3
    code = "```python\n" + "\n".join(f"value_{i} = {i} * 2  # <{i}>" for i in range(60)) + "\n```"
    parts = [paragraph.strip()] * 8 + [code] + [paragraph.strip()] * 8
    text = "\n\n".join(parts)
    assert 8900 <= len(text) <= 9100
    return text, code


def test_nine_thousand_characters_with_a_code_block_make_three_messages() -> None:
    text, code = _nine_thousand_with_code()
    chunks = split_message(text)
    assert len(chunks) == 3
    for chunk in chunks:
        assert utf16_len(chunk.html) <= MESSAGE_LIMIT
        assert utf16_len(parse_telegram_html(chunk.html)) <= MESSAGE_LIMIT
    holders = [c for c in chunks if "value_0 = 0" in c.markdown]
    assert len(holders) == 1 and code in holders[0].markdown  # the block is whole
    assert " ".join(c.markdown for c in chunks).split() == text.split()  # nothing lost


def test_split_counts_utf16_units_not_characters() -> None:
    """2000 emoji and spaces: 3999 characters but 5999 UTF-16 units, so two messages."""
    text = " ".join(["😀"] * 2000)
    assert len(text) < MESSAGE_LIMIT < utf16_len(text)
    chunks = split_message(text)
    assert len(chunks) == 2
    assert all(utf16_len(c.html) <= MESSAGE_LIMIT for c in chunks)
    assert sum(c.markdown.count("😀") for c in chunks) == 2000


def test_a_code_block_longer_than_a_message_is_reopened_in_each() -> None:
    code = "```\n" + "\n".join(f"line {i} <tag> & more" for i in range(400)) + "\n```"
    chunks = split_message(code)
    assert len(chunks) >= 3
    shown = []
    for chunk in chunks:
        assert chunk.html.startswith("<pre>") and chunk.html.endswith("</pre>")
        shown.append(parse_telegram_html(chunk.html))
    assert "\n".join(shown).splitlines() == [f"line {i} <tag> & more" for i in range(400)]


def test_plain_fallback_chunks_fit() -> None:
    text = "word " * 2000
    chunks = plain_chunks(text)
    assert len(chunks) == 3
    assert all(utf16_len(c) <= MESSAGE_LIMIT for c in chunks)
    assert " ".join(chunks).split() == text.split()


_PIECES = ["@", "[", "](", ")", "tg://user?id=1001", "tg:", "@bob_1", "a@b.c", "*", "`", "\n"]
_MENTIONISH = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=4)), max_size=20).map(
    "".join
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_MENTIONISH, st.text(max_size=80)))
@example("*@*tg://user?id=1001")  # emphasis around the "@": the visible text was "@tg..."
@example("hi *@*durov_team and _@_someone")
def test_no_rendered_reply_can_notify_anyone(text: str) -> None:
    """Whatever the model writes, the HTML sent to Telegram has no tg:// link and no text
    Telegram would turn into an @mention; the words read the same."""
    for chunk in split_message(without_mentions(text)):
        assert 'href="tg:' not in chunk.html.lower()
        for href in re.findall(r'<a href="([^"]*)"', chunk.html):
            assert href.lower().startswith(("http://", "https://", "mailto:"))
        visible = parse_telegram_html(chunk.html)
        assert not re.search(r"(?<![\w@])@\w", visible)
    assert without_mentions(text).replace("\u2060", "") == text.replace("\u2060", "")


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        (r"\*not italic\* and \_x\_", "*not italic* and _x_"),
        (r"\[x](https://y.org) \`z\`", "[x](https://y.org) `z`"),
        # A backslash before anything but ASCII punctuation is a backslash.
        (r"C:\Users and a \ alone\\", r"C:\Users and a \ alone" + "\\"),
    ],
)
def test_backslash_escapes_show_the_character(markdown: str, html: str) -> None:
    """CommonMark's backslash escapes, as Discord shows them: the bot quotes names this way."""
    assert render_html(markdown) == html


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab _*~`[]()#>-+|\\\n:/@&<.1h"), max_size=40))
@example("# - *Co* [x](https://y.org) ```")
def test_a_quoted_name_reads_as_written(text: str) -> None:
    """Whatever an operator names a persona, the bot's answer quoting it (literal) shows those
    very characters in Telegram, with no formatting added."""
    rendered = render_html(literal(text))
    assert "<" not in rendered.replace("&lt;", ""), rendered
    assert parse_telegram_html(rendered) == text
