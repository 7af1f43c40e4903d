"""The command menu Telegram clients show under ``/``, set per scope (docs/telegram.md#menus).

Telegram picks, for a private chat, the first list set of: that chat, all private chats,
the default (each first with the user's language, then without); for a group: that chat's
admins, all group admins, that chat, all group chats, the default. So:

- ``default``: every command everyone may use (what older clients and any other scope fall
  back to), as before scopes existed;
- ``all_private_chats``: the same;
- ``all_group_chats``: without the commands about one person's own data (``/memory``,
  ``/forget``, ``/export``, ``/reminders``, ``/timezone``, ``/start``): their answers are for
  that person, so the group's menu does not offer them (typed, they still work);
- ``chat`` of each admin's private chat: everyone's commands and the admin-only ones
  (``/stats``, a scene's ``/stop``). An admin who never started the bot has no such chat yet:
  Telegram refuses that scope, which is logged and skipped.

Each of them once more per language of the bot's personas (``CommandMenu.languages``,
docs/i18n.md) with the translated descriptions, under Telegram's ``language_code``; a language
no persona uses any more loses its menu in every scope (``deleteMyCommands``), so its people
get the scope's menu without a language.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from aiogram import Bot
from aiogram.exceptions import ClientDecodeError, TelegramAPIError
from aiogram.types import (
    BotCommand,
    BotCommandScopeAllGroupChats,
    BotCommandScopeAllPrivateChats,
    BotCommandScopeChat,
    BotCommandScopeDefault,
    BotCommandScopeUnion,
)

from bot.core.menu import CommandMenu, MenuEntry

log = logging.getLogger("personabot.telegram")

#: Telegram's limits: 100 commands a list, names ``[a-z0-9_]{1,32}``, descriptions 1-256.
_MAX_COMMANDS: Final = 100
_ERRORS: Final = (TelegramAPIError, ClientDecodeError)
_COMMAND_NAME: Final = re.compile(r"[a-z0-9_]{1,32}")
#: The ``language_code`` of each catalog's menu (two-letter ISO 639-1, as Telegram takes).
MENU_LANGUAGES: Final = {"ru": "ru", "uk": "uk", "he": "he", "zh_Hans": "zh"}


def flat_menu(commands: Sequence[tuple[str, str]]) -> CommandMenu:
    """The menu of a handler that tells no scopes: every command for everyone everywhere."""
    return CommandMenu(tuple(MenuEntry(name, description) for name, description in commands))


def scoped(menu: CommandMenu) -> list[tuple[BotCommandScopeUnion, Sequence[MenuEntry]]]:
    """Each scope with the entries it lists (module docstring), without languages."""
    lists: list[tuple[BotCommandScopeUnion, Sequence[MenuEntry]]] = [
        (BotCommandScopeDefault(), menu.everyone(group=False)),
        (BotCommandScopeAllPrivateChats(), menu.everyone(group=False)),
        (BotCommandScopeAllGroupChats(), menu.everyone(group=True)),
    ]
    if any(e.admin for e in menu.entries):
        for admin in menu.admins:
            if admin.isdecimal():  # a Telegram user id: their private chat has the same id
                lists.append((BotCommandScopeChat(chat_id=int(admin)), menu.for_admins()))
    return lists


async def set_menus(
    bot: Bot,
    menu: CommandMenu,
    *,
    bot_key: str,
    redact: Callable[[str], str],
    codes: Mapping[str, str] = MENU_LANGUAGES,
) -> None:
    """``setMyCommands`` for every scope and language (``codes``: catalog -> Telegram's
    code), then ``deleteMyCommands`` for every scope of each language in ``codes`` no
    persona uses now; each failure is logged, never fatal."""
    menus: list[tuple[str | None, CommandMenu]] = [(None, menu)]
    menus += [(codes[lang], local) for lang, local in menu.translated() if lang in codes]
    for language, local in menus:
        for scope, entries in scoped(local):
            commands = [
                BotCommand(command=e.name, description=e.description[:256])
                for e in entries
                if _valid(e)
            ][:_MAX_COMMANDS]
            try:
                await bot.set_my_commands(commands, scope=scope, language_code=language)
            except _ERRORS as exc:
                _failed("setMyCommands", bot_key, scope, language, redact(str(exc)))
    used = {language for language, _ in menus}
    for language in sorted(set(codes.values()) - used):
        for scope, _entries in scoped(menu):
            try:
                await bot.delete_my_commands(scope=scope, language_code=language)
            except _ERRORS as exc:
                _failed("deleteMyCommands", bot_key, scope, language, redact(str(exc)))


def _failed(
    method: str, bot_key: str, scope: BotCommandScopeUnion, language: str | None, error: str
) -> None:
    where = scope.type if language is None else f"{scope.type}, {language}"
    log.warning("telegram bot %s: %s (%s) failed: %s", bot_key, method, where, error)


def _valid(entry: MenuEntry) -> bool:
    return bool(entry.description) and _COMMAND_NAME.fullmatch(entry.name) is not None
