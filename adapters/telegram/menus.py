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
  Telegram refuses that scope, which is logged and skipped. Each chat given a menu is recorded
  in the store (``platform_commands``, scope ``telegram-chat:<id>``), so a person taken off
  ``admins`` loses that menu, in every language, at the next start (Telegram cannot list the
  chats that have one).

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
from aiogram.exceptions import ClientDecodeError, TelegramAPIError, TelegramBadRequest
from aiogram.types import (
    BotCommand,
    BotCommandScopeAllGroupChats,
    BotCommandScopeAllPrivateChats,
    BotCommandScopeChat,
    BotCommandScopeDefault,
    BotCommandScopeUnion,
)

from bot.core.errors import StoreError
from bot.core.menu import CommandMenu, MenuEntry, NativeMenu

log = logging.getLogger("personabot.telegram")

#: Telegram's limits: 100 commands a list, names ``[a-z0-9_]{1,32}``, descriptions 1-256.
_MAX_COMMANDS: Final = 100
_ERRORS: Final = (TelegramAPIError, ClientDecodeError)
_COMMAND_NAME: Final = re.compile(r"[a-z0-9_]{1,32}")
#: The ``language_code`` of each catalog's menu (two-letter ISO 639-1, as Telegram takes).
MENU_LANGUAGES: Final = {"ru": "ru", "uk": "uk", "he": "he", "zh_Hans": "zh"}
#: The record of a chat given its own menu (an admin's private chat).
_CHAT_SCOPE: Final = "telegram-chat:"


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
    records: NativeMenu | None = None,
) -> None:
    """``setMyCommands`` for every scope and language (``codes``: catalog -> Telegram's
    code), then ``deleteMyCommands`` for every scope of each language in ``codes`` no
    persona uses now, and (with ``records``, the store's record of chats given a menu) for
    every language of each chat recorded earlier that has no menu of its own now; each
    failure is logged, never fatal."""
    menus: list[tuple[str | None, CommandMenu]] = [(None, menu)]
    menus += [(codes[lang], local) for lang, local in menu.translated() if lang in codes]
    chats: set[int] = set()  # the chats given their own menu now
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
            else:
                if isinstance(scope, BotCommandScopeChat) and isinstance(scope.chat_id, int):
                    chats.add(scope.chat_id)
    used = {language for language, _ in menus}
    for language in sorted(set(codes.values()) - used):
        for scope, _entries in scoped(menu):
            await _delete(bot, scope, language, bot_key, redact)
    if records is not None:
        admins = {s.chat_id for s, _ in scoped(menu) if isinstance(s, BotCommandScopeChat)}
        await _forget_chats(bot, records, (chats, admins), [None, *codes.values()], bot_key, redact)


async def _forget_chats(
    bot: Bot,
    records: NativeMenu,
    chats: tuple[set[int], set[int | str]],
    languages: Sequence[str | None],
    bot_key: str,
    redact: Callable[[str], str],
) -> None:
    """Record the chats given a menu now (``chats``: those set, and every admin's); delete
    the menus of the chats recorded before that are no admin's now, in every language, and
    forget a chat only once each delete is done (a failure keeps it for the next start; an
    admin whose menu failed to be set this time is still an admin). A store fault is logged:
    the menus stay as they are until a start that can read and write the record."""
    given, admins = chats
    try:
        for kept in sorted(given):
            await records.record_commands(f"{_CHAT_SCOPE}{kept}", {"menu": ""})
        for recorded in await records.command_scopes():
            chat = recorded.removeprefix(_CHAT_SCOPE)
            if recorded == chat or not chat.isdecimal() or int(chat) in admins:
                continue  # not a chat's record (Discord's scopes), or an admin's
            scope = BotCommandScopeChat(chat_id=int(chat))
            deleted = [
                await _delete(bot, scope, language, bot_key, redact) for language in languages
            ]
            if all(deleted):
                await records.record_commands(recorded, {})
    except StoreError as exc:
        log.warning("telegram bot %s: the record of chat menus failed: %s", bot_key, exc)


async def _delete(
    bot: Bot,
    scope: BotCommandScopeUnion,
    language: str | None,
    bot_key: str,
    redact: Callable[[str], str],
) -> bool:
    """``deleteMyCommands``; whether that scope's list is gone (a chat Telegram refuses,
    400, has none to delete); a failure is logged."""
    try:
        await bot.delete_my_commands(scope=scope, language_code=language)
    except TelegramBadRequest:
        return True
    except _ERRORS as exc:
        _failed("deleteMyCommands", bot_key, scope, language, redact(str(exc)))
        return False
    return True


def _failed(
    method: str, bot_key: str, scope: BotCommandScopeUnion, language: str | None, error: str
) -> None:
    where = scope.type if language is None else f"{scope.type}, {language}"
    log.warning("telegram bot %s: %s (%s) failed: %s", bot_key, method, where, error)


def _valid(entry: MenuEntry) -> bool:
    return bool(entry.description) and _COMMAND_NAME.fullmatch(entry.name) is not None
