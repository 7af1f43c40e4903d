"""The chat commands as native platform commands (Discord application commands): each built-in
command's typed options, a plugin command's free-text ``args`` (docs/discord.md#7-commands).

What a native command carries comes back as the text of a typed command (``/persona Ada``), so
it runs through the same router, access check and handler as one typed in the chat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from bot.core.i18n import N_, Texts
from bot.core.menu import BARE, CommandOption, NativeCommand
from bot.runtime.commands import PRIVATE_COMMANDS
from bot.runtime.extensions import CommandSpec
from bot.runtime.languages import DISCORD_LOCALES

#: Discord's limits: a description is 1-100 characters.
DESCRIPTION_LIMIT: Final = 100

#: The options of the built-in commands that take any (the others take none).
BUILTIN_OPTIONS: Final[dict[str, tuple[CommandOption, ...]]] = {
    "persona": (
        CommandOption("name", N_("the persona to switch to (empty: list them)"), suggest=True),
    ),
    "timezone": (
        CommandOption("zone", N_("e.g. Europe/Berlin or UTC+2; clear forgets yours (empty: show)")),
    ),
    "checkins": (CommandOption("state", N_("on or off (empty: show)"), choices=("on", "off")),),
    # /forget asks first (docs/telegram.md#buttons): confirm erases, cancel keeps.
    "forget": (
        CommandOption(
            "answer", N_("confirm erases, cancel keeps (empty: ask)"), choices=("confirm", "cancel")
        ),
    ),
    "stop": (CommandOption("state", N_("off ends the mute"), choices=("off",)),),
}

#: ``/reminders list`` and ``/reminders cancel id:`` (the id offered from the asker's own).
REMINDERS: Final = (
    NativeCommand(BARE, N_("list your reminders")),
    NativeCommand(
        "cancel",
        N_("cancel one of your reminders"),
        options=(
            CommandOption(
                "id", N_("the reminder to cancel"), kind="integer", required=True, suggest=True
            ),
        ),
    ),
)

#: A plugin command's one option: whatever follows its name when typed.
ARGS: Final = CommandOption("args", N_("what follows the command, as when typed"))


def native_command(
    spec: CommandSpec, *, plugin: bool, catalogs: Sequence[Texts] = ()
) -> NativeCommand:
    """One chat command as a native command (a plugin's with its help text and ``args``),
    its descriptions also in the languages of ``catalogs`` (names stay English: a command is
    typed the same in every language)."""
    description = _fitted(spec.description or spec.name)
    if plugin:
        command = NativeCommand(spec.name, description, options=(ARGS,))
    elif spec.name == "reminders":
        command = NativeCommand(spec.name, description, subcommands=REMINDERS, private=True)
    else:
        command = NativeCommand(
            spec.name,
            description,
            options=BUILTIN_OPTIONS.get(spec.name, ()),
            private=spec.name in PRIVATE_COMMANDS,
        )
    return _localized(command, catalogs) if catalogs else command


def _localized(command: NativeCommand, catalogs: Sequence[Texts]) -> NativeCommand:
    return replace(
        command,
        localized=_translations(command.description, catalogs),
        options=tuple(
            replace(o, localized=_translations(o.description, catalogs)) for o in command.options
        ),
        subcommands=tuple(_localized(sub, catalogs) for sub in command.subcommands),
    )


def _translations(text: str, catalogs: Sequence[Texts]) -> tuple[tuple[str, str], ...]:
    """(Discord locale, text) for each catalog that translates ``text`` (a plugin's help
    text is in none: it stays as written everywhere)."""
    pairs: list[tuple[str, str]] = []
    for texts in catalogs:
        translated = texts(text)
        if translated != text:
            pairs += [(loc, _fitted(translated)) for loc in DISCORD_LOCALES.get(texts.language, ())]
    return tuple(pairs)


def _fitted(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= DESCRIPTION_LIMIT else line[: DESCRIPTION_LIMIT - 1] + "…"
