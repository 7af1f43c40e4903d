"""Built-in texts in the person's language: gettext catalogs (docs/i18n.md).

Everything personabot itself says (command answers, notices, ``/help``, command menus) is
written in English in the code, marked for extraction, and looked up in a compiled catalog
(``bot/locales/<language>/LC_MESSAGES/personabot.mo``, made from the ``.po`` files by
``scripts/catalogs.py``). The English text is the message id, so a text missing from a
catalog (or a plugin's text, or an operator's own text from the TOML) comes out unchanged:
that is how an operator's override wins in every language.

There is no current language: a ``Texts`` is chosen per conversation (the persona's
``language``, or the person's platform language) and passed to whatever produces the text.
"""

from __future__ import annotations

import gettext
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

DOMAIN: Final = "personabot"
#: The compiled catalogs ship inside the package (the wheel and a checkout alike).
LOCALES: Final = Path(__file__).resolve().parent.parent / "locales"
ENGLISH: Final = "en"
#: ``language = "auto"``: the person's platform language when a catalog has it, else English.
AUTO: Final = "auto"
#: The languages whose catalogs ship (English is the code's own text).
SHIPPED: Final = ("en", "ru", "uk", "he", "zh_Hans")
#: Written right to left: their texts get directional marks (``Texts.finish``).
RIGHT_TO_LEFT: Final = frozenset({"he"})

_S = TypeVar("_S", bound=str)


def N_(message: str) -> str:
    """Mark a text for extraction where it is defined; it is translated where it is shown."""
    return message


def catalog_language(tag: str | None) -> str | None:
    """The shipped catalog for a language tag (a persona's ``language``, Telegram's
    ``language_code`` such as ``uk`` or ``zh-hans``, Discord's ``locale`` such as ``zh-CN``);
    None when none ships. Chinese without a script or region, or written in Simplified
    characters (Hans, CN, SG), is ``zh_Hans``; Traditional (Hant, TW, HK, MO) has no catalog."""
    if not tag:
        return None
    parts = [p for p in re.split(r"[-_]", tag.strip().lower()) if p]
    if not parts:
        return None
    base = {"iw": "he"}.get(parts[0], parts[0])  # "iw": Hebrew's withdrawn code, still seen
    if base == "zh":
        rest = set(parts[1:])
        return None if rest & {"hant", "tw", "hk", "mo"} else "zh_Hans"
    return base if base in SHIPPED else None


class Verbatim(str):
    """Text shown as written, never finished with directional marks: a persona's greeting
    is the persona's own words in the persona's own language (docs/i18n.md), so an English
    persona's greeting on a Hebrew bot is not laid out right to left."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, eq=False)
class Texts:
    """The built-in texts of one language: ``texts("English text")`` is its translation."""

    language: str
    translations: gettext.NullTranslations

    def gettext(self, message: str) -> str:
        """The translation of ``message`` (itself when the catalog lacks it)."""
        # "" is the catalog's header entry, never a text: an empty override stays empty.
        return self.translations.gettext(message) if message else message

    __call__ = gettext

    def ngettext(self, singular: str, plural: str, n: int) -> str:
        """The form of a text for the number ``n`` (the language's plural rule)."""
        return self.translations.ngettext(singular, plural, n)

    @property
    def right_to_left(self) -> bool:
        """Whether the language is written right to left."""
        return self.language in RIGHT_TO_LEFT

    def finish(self, text: _S) -> _S:
        """``text`` ready to be shown: in a right-to-left language each line starts with a
        right-to-left mark (so that a line opening with ``/help`` is still laid out right to
        left) and each left-to-right run (a command with its words, a date, a time zone) is
        isolated (LRI...PDI), so ``/reminders cancel N`` and ``2026-12-06 15:00`` read in
        their own order inside the sentence. Other languages: unchanged. Keeps the type of a
        ``str`` subclass (a refusal stays one)."""
        if not self.right_to_left or not text or isinstance(text, Verbatim):
            return text
        lines = (_directed(line) for line in text.split("\n"))
        return type(text)("\n".join(lines))


#: Directional marks (Unicode bidirectional algorithm, UAX #9).
RLM: Final = "\u200f"
LRI: Final = "\u2066"
PDI: Final = "\u2069"
#: A left-to-right run: it starts with a Latin letter, a digit, ``/``, ``#`` or ``@`` and holds
#: no right-to-left letter, no bracket and no markup character (``<>*```); it ends on a letter
#: or digit. Trailing punctuation and brackets stay in the right-to-left sentence, so "(UTC)"
#: keeps both its brackets on the sentence's side and they mirror as a pair.
_LTR_RUN: Final = re.compile(
    r"[/#@A-Za-z0-9]"
    r"(?:[^\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufeff\n\u2066-\u2069()\[\]{}<>*`]*[A-Za-z0-9_])?"
)


def _directed(line: str) -> str:
    # The mark goes after a list item's indent and bullet, which must open the line for
    # Markdown to show it as a list (Telegram's renderer, Discord); a line whose text starts
    # with the mark was finished already (a notice inside an answer).
    item = _LIST_ITEM.match(line)
    assert item is not None  # the pattern matches any line
    head, text = item.group(1, 2)
    return line if text.startswith(RLM) else head + RLM + _LTR_RUN.sub(_isolated, text)


#: A line's indent and list bullet, if any, and the rest (always matches).
_LIST_ITEM: Final = re.compile(r"(\s*(?:[-*+]\s+)?)(.*)", re.DOTALL)


def _isolated(match: re.Match[str]) -> str:
    # A run with a link is left as it is: marks inside it would break the address.
    return match[0] if "://" in match[0] else f"{LRI}{match[0]}{PDI}"


def english() -> Texts:
    """The texts as written in the code."""
    return Texts(ENGLISH, gettext.NullTranslations())


def load_texts(language: str, locales: Path = LOCALES) -> Texts:
    """The compiled catalog of a shipped ``language`` (English: the code's own texts).
    ``ConfigError``-free on purpose: the settings validate the name first; a missing file
    here is a broken install, reported as ``FileNotFoundError``."""
    if language == ENGLISH:
        return english()
    path = locales / language / "LC_MESSAGES" / f"{DOMAIN}.mo"
    with path.open("rb") as file:
        return Texts(language, gettext.GNUTranslations(file))
