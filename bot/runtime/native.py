"""The chat commands as native platform commands (Discord application commands): each built-in
command's typed options, a plugin command's free-text ``args`` (docs/discord.md#7-commands).

What a native command carries comes back as the text of a typed command (``/persona Ada``), so
it runs through the same router, access check and handler as one typed in the chat.
"""

from __future__ import annotations

from typing import Final

from bot.core.menu import BARE, CommandOption, NativeCommand
from bot.runtime.commands import PRIVATE_COMMANDS
from bot.runtime.extensions import CommandSpec

#: Discord's limits: a description is 1-100 characters.
DESCRIPTION_LIMIT: Final = 100

#: The options of the built-in commands that take any (the others take none).
BUILTIN_OPTIONS: Final[dict[str, tuple[CommandOption, ...]]] = {
    "persona": (
        CommandOption("name", "the persona to switch to (empty: list them)", suggest=True),
    ),
    "timezone": (
        CommandOption("zone", "e.g. Europe/Berlin or UTC+2; clear forgets yours (empty: show)"),
    ),
    "checkins": (CommandOption("state", "on or off (empty: show)", choices=("on", "off")),),
    # /forget asks first (docs/telegram.md#buttons): confirm erases, cancel keeps.
    "forget": (
        CommandOption(
            "answer", "confirm erases, cancel keeps (empty: ask)", choices=("confirm", "cancel")
        ),
    ),
    "stop": (CommandOption("state", "off ends the mute", choices=("off",)),),
}

#: ``/reminders list`` and ``/reminders cancel id:`` (the id offered from the asker's own).
REMINDERS: Final = (
    NativeCommand(BARE, "list your reminders"),
    NativeCommand(
        "cancel",
        "cancel one of your reminders",
        options=(
            CommandOption(
                "id", "the reminder to cancel", kind="integer", required=True, suggest=True
            ),
        ),
    ),
)

#: A plugin command's one option: whatever follows its name when typed.
ARGS: Final = CommandOption("args", "what follows the command, as when typed")


def native_command(spec: CommandSpec, *, plugin: bool) -> NativeCommand:
    """One chat command as a native command (a plugin's with its help text and ``args``)."""
    description = _fitted(spec.description or spec.name)
    if plugin:
        return NativeCommand(spec.name, description, options=(ARGS,))
    if spec.name == "reminders":
        return NativeCommand(spec.name, description, subcommands=REMINDERS, private=True)
    return NativeCommand(
        spec.name,
        description,
        options=BUILTIN_OPTIONS.get(spec.name, ()),
        private=spec.name in PRIVATE_COMMANDS,
    )


def _fitted(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= DESCRIPTION_LIMIT else line[: DESCRIPTION_LIMIT - 1] + "…"
