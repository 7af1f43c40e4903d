"""A bot's commands as a platform shows them natively (Discord application commands): their
options, and the suggestions an option offers while a person types (docs/discord.md#7-commands).

Plain frozen types and a Protocol, so the runtime (which knows the commands) and an adapter
(which knows the platform) share them without knowing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
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
class LocalizedMenu(Protocol):
    """What an inbound handler offers a platform whose command menu has a version per
    language (Telegram's ``setMyCommands`` with ``language_code``): docs/i18n.md."""

    def localized_commands(
        self, codes: Mapping[str, str]
    ) -> dict[str, tuple[tuple[str, str], ...]]:
        """(name, description) of every menu command in each language the bot's personas
        use, keyed by the platform's code for it (``codes``: catalog -> platform code)."""
        ...


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

    async def record_commands(self, scope: str, commands: dict[str, str]) -> None:
        """Remember the commands this bot has created in ``scope`` now (replaces the record)."""
        ...
