"""The bot's chat commands as Discord application (slash) commands, synced at start
(docs/discord.md#sync).

Why discord.py's raw HTTP routes and not ``app_commands.CommandTree``: ``CommandTree.sync()``
replaces every command of the application in one bulk overwrite (``PUT``), deleting the
commands someone else registered for the same application (by hand, another program). A sync
here lists what exists and writes per command: it creates what is missing, edits a command of
ours that changed, deletes only a command this bot recorded as its own earlier (the store's
``platform_commands``) that it no longer has, and leaves every other command alone. A sync
with nothing changed makes no write at all. Each request goes through discord.py's HTTP
client, which waits out a 429 for its ``retry_after`` and retries; the requests go one at a
time, so a sync never bursts.

A sync also visits every scope where the record says we created commands but the policy no
longer syncs (``"global"`` switched to ``"guilds"`` or back, a server dropped from
``guilds``) and deletes ours there, nothing else. Each command created is recorded right
after Discord made it, so a sync cut short (a store fault, a Discord 5xx, a network drop, a
stop during a 429 wait) leaves nothing of ours unrecorded but, at most, the one command
whose own record failed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

import discord
from discord.http import Route

from bot.core.errors import AdapterError
from bot.core.menu import CommandOption, NativeCommand, NativeMenu

log = logging.getLogger("personabot.discord")

SyncPolicy = Literal["global", "guilds", "off"]
#: Discord's application command types and option types used here.
CHAT_INPUT: Final = 1
SUB_COMMAND: Final = 1
STRING: Final = 3
INTEGER: Final = 4
#: Discord error code: the bot was not invited with the ``applications.commands`` scope.
MISSING_ACCESS: Final = 50001
#: The keys of a command (and of its options) that a sync compares: what we send.
_COMPARED: Final = ("type", "name", "description", "description_localizations", "options")
_OPTION_KEYS: Final = (
    "type",
    "name",
    "description",
    "description_localizations",
    "required",
    "autocomplete",
    "choices",
    "options",
)

JSON = dict[str, Any]
#: Listing commands: the full localization dictionaries rather than one locale's text.
_WITH_LOCALIZATIONS: Final = {"with_localizations": "true"}


def command_payload(command: NativeCommand) -> JSON:
    """The JSON of one application command (chat input)."""
    payload: JSON = {"type": CHAT_INPUT, "name": command.name, "description": command.description}
    _add_localizations(payload, command.localized)
    if command.subcommands:
        payload["options"] = [_subcommand(sub) for sub in command.subcommands]
    elif command.options:
        payload["options"] = [_option(option) for option in command.options]
    return payload


def _subcommand(command: NativeCommand) -> JSON:
    sub: JSON = {"type": SUB_COMMAND, "name": command.name, "description": command.description}
    _add_localizations(sub, command.localized)
    if command.options:
        sub["options"] = [_option(option) for option in command.options]
    return sub


def _option(option: CommandOption) -> JSON:
    kind = INTEGER if option.kind == "integer" else STRING
    data: JSON = {"type": kind, "name": option.name, "description": option.description}
    _add_localizations(data, option.localized)
    if option.required:
        data["required"] = True
    if option.choices:
        data["choices"] = [
            {"name": c, "value": int(c) if kind == INTEGER else c} for c in option.choices
        ]
    elif option.suggest:
        data["autocomplete"] = True
    return data


def _add_localizations(data: JSON, localized: tuple[tuple[str, str], ...]) -> None:
    """Discord's ``description_localizations`` (locale -> text); names are never localized,
    so a command is typed the same in every language (docs/i18n.md)."""
    if localized:
        data["description_localizations"] = dict(localized)


def same_command(existing: Mapping[str, Any], wanted: JSON) -> bool:
    """Whether a command as Discord lists it is the one we would write (the keys we send;
    Discord leaves out false and empty values, and adds keys of its own)."""
    return _shape(existing, _COMPARED) == _shape(wanted, _COMPARED)


def _shape(data: Mapping[str, Any], keys: Sequence[str]) -> JSON:
    out: JSON = {}
    for key in keys:
        value = data.get(key)
        if key == "options" and isinstance(value, list):  # a subcommand's own, too
            value = [_shape(o, _OPTION_KEYS) if isinstance(o, Mapping) else o for o in value]
        if key == "type" and value is None:
            value = CHAT_INPUT
        if value not in (None, False, [], ""):
            out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one scope's sync wrote."""

    scope: str
    created: tuple[str, ...] = ()
    edited: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    foreign: tuple[str, ...] = ()  # a command of that name not ours: left alone

    @property
    def writes(self) -> int:
        """Requests that changed something on Discord."""
        return len(self.created) + len(self.edited) + len(self.deleted)


class _Routes(Protocol):
    """One scope's command routes (global, or one guild's)."""

    async def list(self) -> list[JSON]: ...
    async def create(self, payload: JSON) -> JSON: ...
    async def edit(self, command_id: str, payload: JSON) -> JSON: ...
    async def delete(self, command_id: str) -> None: ...


@dataclass(frozen=True, slots=True)
class _GlobalRoutes:
    http: discord.http.HTTPClient
    app: int

    async def list(self) -> list[JSON]:
        # with_localizations: the full dictionaries, to compare with what we would write.
        route = Route("GET", "/applications/{application_id}/commands", application_id=self.app)
        return list(await self.http.request(route, params=_WITH_LOCALIZATIONS))

    async def create(self, payload: JSON) -> JSON:
        return dict(await self.http.upsert_global_command(self.app, payload))  # type: ignore[arg-type]

    async def edit(self, command_id: str, payload: JSON) -> JSON:
        # Not http.edit_global_command: it drops every key but name, description and
        # options, so a changed localization would never reach Discord.
        route = Route(
            "PATCH",
            "/applications/{application_id}/commands/{command_id}",
            application_id=self.app,
            command_id=command_id,
        )
        return dict(await self.http.request(route, json=payload))

    async def delete(self, command_id: str) -> None:
        await self.http.delete_global_command(self.app, command_id)


@dataclass(frozen=True, slots=True)
class _GuildRoutes:
    http: discord.http.HTTPClient
    app: int
    guild: int

    async def list(self) -> list[JSON]:
        route = Route(
            "GET",
            "/applications/{application_id}/guilds/{guild_id}/commands",
            application_id=self.app,
            guild_id=self.guild,
        )
        return list(await self.http.request(route, params=_WITH_LOCALIZATIONS))

    async def create(self, payload: JSON) -> JSON:
        return dict(await self.http.upsert_guild_command(self.app, self.guild, payload))

    async def edit(self, command_id: str, payload: JSON) -> JSON:
        route = Route(  # the whole payload, as for the global scope
            "PATCH",
            "/applications/{application_id}/guilds/{guild_id}/commands/{command_id}",
            application_id=self.app,
            guild_id=self.guild,
            command_id=command_id,
        )
        return dict(await self.http.request(route, json=payload))

    async def delete(self, command_id: str) -> None:
        await self.http.delete_guild_command(self.app, self.guild, command_id)


async def sync_commands(
    client: discord.Client,
    menu: NativeMenu,
    policy: SyncPolicy,
    guilds: Collection[int] = (),
) -> list[SyncReport]:
    """Sync the bot's commands under ``policy`` (``guilds``: where ``"guilds"`` registers);
    a scope Discord refuses is logged and skipped. AdapterError when the application is
    unknown (not logged in)."""
    if policy == "off":
        return []
    app = client.application_id
    if app is None:
        raise AdapterError("the Discord application id is not known yet (not logged in)")
    wanted = [command_payload(c) for c in menu.native_commands]
    scopes: list[tuple[str, _Routes]] = (
        [("global", _GlobalRoutes(client.http, app))]
        if policy == "global"
        else [(f"guild:{g}", _GuildRoutes(client.http, app, g)) for g in guilds]
    )
    # Scopes we once synced and no longer do: nothing wanted there, so ours are deleted.
    synced = {scope for scope, _ in scopes}
    for scope in await menu.command_scopes():
        if scope not in synced and (routes := _routes_of(scope, client.http, app)) is not None:
            scopes.append((scope, routes))
    reports = []
    for scope, routes in scopes:
        wanted_here = wanted if scope in synced else []
        try:
            reports.append(await _sync_scope(scope, routes, menu, wanted_here))
        except discord.HTTPException as exc:
            if exc.code == MISSING_ACCESS:
                log.error(
                    "Discord refuses the commands in %s: invite the bot with the scopes "
                    "'bot applications.commands' (docs/discord.md#3-invite-the-bot-to-a-server)",
                    scope,
                )
            else:
                log.error("Discord commands in %s not synced: %s", scope, exc)
    return reports


def _routes_of(scope: str, http: discord.http.HTTPClient, app: int) -> _Routes | None:
    """The routes of a recorded scope (``global``, ``guild:<id>``); None for a malformed one."""
    if scope == "global":
        return _GlobalRoutes(http, app)
    guild = scope.removeprefix("guild:")
    return _GuildRoutes(http, app, int(guild)) if guild.isdigit() else None


async def _written(routes: _Routes, payload: JSON, command_id: str | None) -> str | None:
    """Create (``command_id`` None) or edit one command: its id; None when Discord refuses
    this command's shape (logged: the others are synced all the same)."""
    try:
        if command_id is None:
            return str((await routes.create(payload))["id"])
        await routes.edit(command_id, payload)
    except discord.HTTPException as exc:
        if exc.status != 400:
            raise
        log.error("Discord refuses the command /%s: %s", payload["name"], exc)
        return None
    return command_id


async def _sync_scope(
    scope: str, routes: _Routes, menu: NativeMenu, wanted: list[JSON]
) -> SyncReport:
    """One scope: create, edit, delete only ours; record what is ours now. The record is
    rewritten after each create, not once at the end: a sync cut short after Discord made
    a command must not leave it unrecorded, or every later sync takes it for someone
    else's (never updated, never deleted)."""
    existing = {
        str(c["name"]): c
        for c in await routes.list()
        if isinstance(c, dict) and c.get("type", CHAT_INPUT) == CHAT_INPUT and "name" in c
    }
    recorded = await menu.registered_commands(scope)
    record = dict(recorded)  # what the store holds as ours in this scope, kept current
    ours: dict[str, str] = {}
    created: list[str] = []
    edited: list[str] = []
    foreign: list[str] = []
    for payload in wanted:
        name = payload["name"]
        found = existing.get(name)
        if found is not None and same_command(found, payload):
            # Ours, or identical to ours (a record lost with an earlier database): adopted.
            ours[name] = str(found["id"])
        elif found is None or recorded.get(name) == str(found["id"]):
            written = await _written(routes, payload, None if found is None else str(found["id"]))
            if written is not None:
                ours[name] = written
                (created if found is None else edited).append(name)
                if record.get(name) != written:
                    record[name] = written
                    await menu.record_commands(scope, record)
            elif found is not None:
                ours[name] = str(found["id"])  # still ours, as it was
        else:
            foreign.append(name)
            log.warning(
                "the Discord command /%s in %s was not made by this bot: left alone (the "
                "typed command still works)",
                name,
                scope,
            )
    deleted = []
    listed = {str(c["id"]) for c in existing.values()}
    for name, command_id in sorted(recorded.items()):
        if name not in ours and command_id in listed:
            # Another process's sync (another shard starting at once) may have just done it.
            with contextlib.suppress(discord.NotFound):
                await routes.delete(command_id)
            deleted.append(name)
    if ours != record:
        await menu.record_commands(scope, ours)
    report = SyncReport(scope, tuple(created), tuple(edited), tuple(deleted), tuple(foreign))
    log.info(
        "Discord commands in %s: %d created, %d edited, %d deleted, %d unchanged",
        scope,
        len(created),
        len(edited),
        len(deleted),
        len(ours) - len(created) - len(edited),
    )
    return report
