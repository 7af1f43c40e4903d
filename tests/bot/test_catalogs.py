"""The message catalogs (docs/i18n.md): every shipped language translates every built-in text
with the English placeholders, the committed .mo files are what the .po files compile to, the
template holds every text the code marks, and the language settings and tags resolve as
documented."""

from __future__ import annotations

import string
from collections.abc import Iterator
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po
from pydantic import ValidationError

from adapters.telegram.format import render_html
from bot.config import PersonaSettings
from bot.core.i18n import SHIPPED, catalog_language, english, load_texts
from memory.privacy import ForgetReport
from scripts.catalogs import LOCALES, ROOT, SOURCES, TEMPLATE, compiled, po_files

LRI, PDI, RLM = "\u2066", "\u2069", "\u200f"


def _catalog(path: Path) -> Catalog:
    with path.open("rb") as file:
        return read_po(file)


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def _ids(message_id: str | tuple[str, ...]) -> tuple[str, ...]:
    return message_id if isinstance(message_id, tuple) else (message_id,)


def test_every_language_translates_every_text_with_the_english_placeholders() -> None:
    template = {m.id for m in _catalog(TEMPLATE) if m.id}
    assert {p.parent.parent.name for p in po_files()} == set(SHIPPED) - {"en"}
    for po in po_files():
        catalog = _catalog(po)
        assert {m.id for m in catalog if m.id} == template, f"{po}: run the update step"
        for message in catalog:
            if not message.id:
                continue
            english = set().union(*map(_fields, _ids(message.id)))
            forms = _ids(message.string)
            assert all(forms), f"{po}: {message.id!r} is not translated"
            assert not message.fuzzy, f"{po}: {message.id!r} is marked fuzzy"
            if message.pluralizable:
                assert len(forms) == catalog.num_plurals, f"{po}: {message.id!r} plural forms"
            for form in forms:
                assert _fields(form) == english, f"{po}: {message.id!r} -> {form!r}"


def test_the_committed_mo_files_are_compiled_from_the_po_files() -> None:
    for po in po_files():
        mo = po.with_suffix(".mo")
        assert mo.read_bytes() == compiled(po), f"{mo} is stale: run the compile step"


def _marked() -> Iterator[str]:
    keywords = {"_": None, "N_": None, "ngettext": (1, 2)}
    for source in SOURCES:
        for _file, _line, message, _comments, _context in extract_from_dir(
            ROOT / source, keywords=keywords
        ):
            yield from _ids(message)


def test_the_template_holds_every_text_the_code_marks() -> None:
    template = {i for m in _catalog(TEMPLATE) if m.id for i in _ids(m.id)}
    assert set(_marked()) == template, "run the extract and update steps"


def test_a_translation_is_looked_up_and_an_unknown_text_comes_out_as_written() -> None:
    ukrainian = load_texts("uk")
    assert ukrainian("list the commands") == "список команд"
    assert ukrainian("an operator's own text") == "an operator's own text"
    assert ukrainian("") == ""  # never the catalog's header
    plural = (
        "The scene is muted for {minutes} minute (/stop off ends it).",
        "The scene is muted for {minutes} minutes (/stop off ends it).",
    )
    assert [ukrainian.ngettext(*plural, n).split()[4] for n in (1, 3, 5, 21)] == [
        "хвилину",
        "хвилини",
        "хвилин",
        "хвилину",
    ]
    assert english().ngettext(*plural, 2).endswith("minutes (/stop off ends it).")
    assert (LOCALES / "zh_Hans" / "LC_MESSAGES" / "personabot.mo").is_file()


def test_right_to_left_text_isolates_commands_dates_and_latin_runs() -> None:
    hebrew = load_texts("he")
    text = "שלחו /reminders cancel N כדי לבטל.\nאחרי 2026-12-06 15:00 (UTC)."
    assert hebrew.finish(text) == (
        f"{RLM}שלחו {LRI}/reminders cancel N{PDI} כדי לבטל.\n"
        f"{RLM}אחרי {LRI}2026-12-06 15:00{PDI} ({LRI}UTC{PDI})."
    )
    assert hebrew.finish(hebrew.finish(text)).count(LRI) == 3  # runs are isolated once
    assert load_texts("ru").finish(text) == text  # left to right: unchanged


@pytest.mark.parametrize(
    ("tag", "language"),
    [
        ("uk", "uk"),
        ("ru-RU", "ru"),
        ("he", "he"),
        ("iw", "he"),
        ("zh-hans", "zh_Hans"),
        ("zh-CN", "zh_Hans"),
        ("zh", "zh_Hans"),
        ("zh-TW", None),
        ("zh-hant", None),
        ("en-US", "en"),
        ("pt-br", None),
        ("", None),
        (None, None),
        ("../../etc/passwd", None),  # a forged tag names no catalog (no path is built)
        ("x" * 10_000, None),
    ],
)
def test_platform_language_tags_name_a_shipped_catalog_or_none(
    tag: str | None, language: str | None
) -> None:
    assert catalog_language(tag) == language


def _persona(language: str) -> PersonaSettings:
    return PersonaSettings(id="p", name="P", system="x", first_message=["hi"], language=language)


def test_a_persona_s_language_is_a_shipped_catalog_or_auto() -> None:
    assert _persona("zh-Hans").language == "zh_Hans"
    assert _persona("UK").language == "uk"
    assert _persona("Auto").language == "auto"
    with pytest.raises(ValidationError) as error:
        _persona("klingon")
    assert 'use one of en, ru, uk, he, zh_Hans or "auto"' in str(error.value)


def test_the_forget_report_counts_in_the_person_s_language() -> None:
    report = ForgetReport(items=3, erasure=None, reminders=5)
    ukrainian = report.describe(load_texts("uk"))
    assert ukrainian.startswith("Готово: я стер те, що пам’ятав про вас (3 записи),")
    assert "Я видалив ваші нагадування (5 нагадувань)" in ukrainian
    assert report.describe().startswith("Done: I erased what I remembered about you (3 things)")


def test_right_to_left_marks_leave_a_link_alone() -> None:
    hebrew = load_texts("he")
    text = "ראו https://example.org/a ב־/help"
    assert hebrew.finish(text) == f"{RLM}ראו https://example.org/a ב־{LRI}/help{PDI}"


def test_right_to_left_list_items_stay_list_items() -> None:
    """The mark goes after a list item's bullet: Markdown needs "- " to open the line, so a
    /stats or /memory list on a Hebrew bot still shows as a list (Telegram's "•")."""
    hebrew = load_texts("he")
    finished = hebrew.finish("סיכום:\n- תורות: 3\n  * עוד")
    assert finished == f"{RLM}סיכום:\n- {RLM}תורות: {LRI}3{PDI}\n  * {RLM}עוד"
    assert hebrew.finish(finished) == finished  # finished once
    assert render_html(finished).splitlines()[1] == f"• {RLM}תורות: {LRI}3{PDI}"
