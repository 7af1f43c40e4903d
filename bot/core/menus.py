"""A bot's command menu by scope (Telegram's ``setMyCommands``; docs/telegram.md#menus)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MenuEntry:
    """One command of a menu.

    ``private``: about one person's own data or settings (``/memory``, ``/forget``...): shown
    in private chats only, where nobody else reads the answer (typed in a group it still
    works). ``admin``: shown only to the bot's admins, in their private chats.
    """

    name: str
    description: str
    private: bool = False
    admin: bool = False


@dataclass(frozen=True, slots=True)
class CommandMenu:
    """What a platform menu of one bot lists, for whom.

    ``languages``: the language codes the bot's personas speak (a menu is set per language
    too). No persona has a ``language`` yet: the catalogs of translated texts (issue 40 item
    4) fill it; until then it is empty and every menu is the English one.
    """

    entries: tuple[MenuEntry, ...]
    admins: tuple[str, ...] = ()
    languages: tuple[str, ...] = ()

    def everyone(self, *, group: bool) -> tuple[MenuEntry, ...]:
        """The entries everyone sees in a private chat, or in a group."""
        return tuple(e for e in self.entries if not e.admin and not (group and e.private))

    def for_admins(self) -> tuple[MenuEntry, ...]:
        """The entries an admin sees in their private chat: everyone's and the admins'."""
        return self.entries
