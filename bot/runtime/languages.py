"""Which language each bot's built-in texts are in (docs/i18n.md): the persona's
``language``, or with ``auto`` the person's platform language when a catalog has it, else
English."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from bot.core.events import Inbound
from bot.core.i18n import AUTO, ENGLISH, SHIPPED, Texts, catalog_language, english, load_texts

#: Discord's locales of each catalog (Discord has no Hebrew locale).
DISCORD_LOCALES: Final = {"ru": ("ru",), "uk": ("uk",), "zh_Hans": ("zh-CN",)}


class Languages:
    """Each bot's personas' language settings and the loaded catalogs."""

    def __init__(self, personas: Mapping[str, Sequence[tuple[str, str]]] | None = None) -> None:
        """``personas``: each bot's (persona id, ``language``) pairs, its default persona
        first; a bot not named speaks English."""
        self._personas = {bot: tuple(pairs) for bot, pairs in (personas or {}).items()}
        used = {lang for pairs in self._personas.values() for _, lang in pairs}
        wanted = set(SHIPPED) if AUTO in used else used | {ENGLISH}
        # Loaded once at start (a few kilobytes each): a broken install fails at start.
        self._texts: dict[str, Texts] = {
            lang: load_texts(lang) for lang in SHIPPED if lang in wanted
        }
        self._english = english()

    def _setting(self, bot: str, persona: str | None) -> str:
        pairs = self._personas.get(bot, ())
        if persona is not None:
            for pid, language in pairs:
                if pid == persona:
                    return language
        return pairs[0][1] if pairs else ENGLISH

    def texts(self, bot: str, persona: str | None = None, locale: str | None = None) -> Texts:
        """The texts of ``bot`` speaking as ``persona`` (None: its default persona) to a
        person whose platform language is ``locale`` (None: unknown)."""
        setting = self._setting(bot, persona)
        language = catalog_language(locale) if setting == AUTO else setting
        return self._texts.get(language or ENGLISH, self._english)

    def for_inbound(self, inbound: Inbound) -> Texts:
        """The texts to answer ``inbound`` with (its bot's default persona)."""
        return self.texts(inbound.conversation.bot, None, inbound.locale)

    def menu_languages(self, bot: str) -> tuple[Texts, ...]:
        """The catalogs other than English that ``bot``'s menus are localized in: each of its
        personas' language, every shipped one where a persona says ``auto``."""
        settings = {lang for _, lang in self._personas.get(bot, ())}
        every = AUTO in settings
        return tuple(
            texts
            for lang, texts in self._texts.items()
            if lang != ENGLISH and (every or lang in settings)
        )
