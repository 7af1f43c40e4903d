"""A bot's commands as a platform shows them natively (Discord application commands): their
options, and the suggestions an option offers while a person types (docs/discord.md#7-commands);
and a bot's command menu by scope (Telegram's ``setMyCommands``, docs/telegram.md#menus).

Plain frozen types and a Protocol, so the runtime (which knows the commands) and an adapter
(which knows the platform) share them without knowing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol, runtime_checkable

from bot.core.events import Inbound

OptionKind = Literal["text", "integer"]


@dataclass(frozen=True, slots=True)
class CommandOption:
    """One typed option of a native command; its value becomes a word of the command's text
    (``/persona name:Ada`` -> ``/persona Ada``), in the order the options are declared."""

    name: str
    description: str
    kind: OptionKind = "text"
    required: bool = False
    #: The only values allowed (shown as a list); empty: any value of ``kind``.
    choices: tuple[str, ...] = ()
    #: Whether the platform asks ``NativeMenu.suggest`` while the person types it.
    suggest: bool = False
    #: The description in other languages: (platform locale, text) pairs (docs/i18n.md).
    localized: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class NativeCommand:
    """A chat command as a native command: description, options, or subcommands (whose name
    becomes the first word of the text; ``list`` stands for no word: ``/reminders list`` ->
    ``/reminders``)."""

    name: str
    description: str
    options: tuple[CommandOption, ...] = ()
    subcommands: tuple[NativeCommand, ...] = ()
    #: Whether its answers are for the asker's eyes only (about one person's own data).
    private: bool = False
    #: The description in other languages: (platform locale, text) pairs (docs/i18n.md).
    localized: tuple[tuple[str, str], ...] = ()


#: The subcommand that stands for no word (``/reminders list`` -> ``/reminders``).
BARE: Final = "list"


def command_text(name: str, subcommand: str | None, values: list[str]) -> str:
    """The text of the typed command a native one stands for: its name, its subcommand (none
    for ``BARE``), then its options' values in order."""
    words = [subcommand] if subcommand and subcommand != BARE else []
    return " ".join([f"/{name}", *words, *values])


@dataclass(frozen=True, slots=True)
class Suggestion:
    """One value offered for an option: what the person reads, and the value it puts in."""

    label: str
    value: str


@runtime_checkable
class NativeMenu(Protocol):
    """What an inbound handler offers a platform with native commands (the router's view of
    one bot); an adapter whose handler lacks it registers nothing."""

    @property
    def native_commands(self) -> tuple[NativeCommand, ...]:
        """Every command of the bot, admin ones included (the router refuses others)."""
        ...

    async def suggest(
        self, asker: Inbound, command: str, option: str, typed: str
    ) -> tuple[Suggestion, ...]:
        """Values for ``option`` of ``/command`` that start with (or contain) ``typed``, only
        ever from what ``asker`` may see (their own reminders); empty when they may not use
        the bot. ``asker`` is the partial command (never stored)."""
        ...

    async def registered_commands(self, scope: str) -> dict[str, str]:
        """The commands this bot created on its platform in ``scope`` earlier (name -> id),
        as recorded by ``record_commands`` (docs/discord.md#sync)."""
        ...

    async def command_scopes(self) -> tuple[str, ...]:
        """Every scope where this bot has recorded commands (``global``, ``guild:<id>``)."""
        ...

    async def record_commands(self, scope: str, commands: dict[str, str]) -> None:
        """Remember the commands this bot has created in ``scope`` now (replaces the record)."""
        ...


# ------------------------------------------------------------- menus by scope


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

    ``languages``: the same entries in each other language the bot's personas speak, keyed by
    catalog (``uk``, ``zh_Hans``: docs/i18n.md), descriptions translated; a platform sets
    every scope's menu once more per language (Telegram's ``language_code``).
    """

    entries: tuple[MenuEntry, ...]
    admins: tuple[str, ...] = ()
    languages: tuple[tuple[str, tuple[MenuEntry, ...]], ...] = ()

    def translated(self) -> tuple[tuple[str, CommandMenu], ...]:
        """The menu in each of ``languages`` (same scopes and admins)."""
        return tuple((lang, CommandMenu(entries, self.admins)) for lang, entries in self.languages)

    def everyone(self, *, group: bool) -> tuple[MenuEntry, ...]:
        """The entries everyone sees in a private chat, or in a group."""
        return tuple(e for e in self.entries if not e.admin and not (group and e.private))

    def for_admins(self) -> tuple[MenuEntry, ...]:
        """The entries an admin sees in their private chat: everyone's and the admins'."""
        return self.entries


@runtime_checkable
class MenuSource(Protocol):
    """An InboundHandler that tells its bot's command menu by scope (the router's)."""

    @property
    def menu(self) -> CommandMenu:
        """Every command of the bot, which are private-only and admin-only, the admins."""
        ...
