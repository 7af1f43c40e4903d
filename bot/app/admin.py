"""Operator commands that read or change stored data: prompt preview, user memory.

They open the store and the memory service through the App (``open_memory``), never the
queue: nothing is answered while they run. They load no plugins, so that erasing a person's
memory works even while a plugin is broken.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import signal
import sys
from typing import TYPE_CHECKING, Final, TextIO

from bot.app.build import (
    build_retention,
    build_store,
)
from bot.app.preview import preview_prompt
from bot.config import PersonaSettings, Settings
from bot.core.clock import SystemClock
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, UserKey
from bot.core.llm import ImageBlock
from bot.core.terminal import safe_for_terminal
from bot.llm.offline import OfflineLLM
from bot.store.sqlite import SQLiteStore
from memory.assemble import Assembled
from memory.lorebook import LoreSelection
from memory.retention.worker import RetentionPolicy

if TYPE_CHECKING:
    from bot.app.app import App


#: Platforms whose people memory may hold without a [[bots]] entry now: the built-in
#: adapters, the terminal chat and the console's playground.
BUILT_IN_PLATFORMS: Final = frozenset({"telegram", "discord", "console", "web"})


def _bot_for(settings: Settings, platform: str, bot: str | None) -> tuple[str, PersonaSettings]:
    """The bot key and persona of a conversation on ``platform``."""
    if platform == "console":
        if bot is None:
            persona = settings.persona(None)
            return f"console-{persona.id}", persona
        for p in settings.personas:
            if bot in (p.id, f"console-{p.id}"):
                return f"console-{p.id}", p
        # An unknown --bot was the default persona's chat, silently (review 35a).
        known = ", ".join(f"console-{p.id}" for p in settings.personas)
        raise ConfigError([f"--bot: no console bot named {bot!r} (bots: {known})"])
    entries = [b for b in settings.bots if b.platform == platform and bot in (None, b.key)]
    if not entries:
        platforms = sorted({b.platform for b in settings.bots} | {"console"})
        if not any(b.platform == platform for b in settings.bots):
            raise ConfigError(
                [f"--platform: no bot on {platform!r} here (platforms: {', '.join(platforms)})"]
            )
        keys = ", ".join(b.key for b in settings.bots if b.platform == platform)
        raise ConfigError([f"--bot: no {platform} bot named {bot!r} (bots: {keys})"])
    if len(entries) > 1:
        names = ", ".join(b.key for b in entries)
        raise ConfigError([f"--bot: several {platform} bots ({names}); name one with --bot"])
    return entries[0].key, settings.persona(entries[0].default_persona)


async def show_prompt(
    app: App,
    out: TextIO,
    *,
    platform: str,
    chat: str,
    thread: str | None,
    bot: str | None,
    message: str | None = None,
) -> int:
    """Print the prompt the model would get now, layer by layer with token estimates (with
    no input pending: for ``message`` as the next one, or a placeholder)."""
    key, persona = _bot_for(app.settings, platform, bot)
    conversation = ConversationKey(platform, chat, thread, key)
    async with app.open_memory() as (store, memory):
        preview = await preview_prompt(
            app.settings, store, memory, conversation, persona, SystemClock().now(), message
        )
    if preview is None:
        where = f"chat {chat!r}" + (f" (thread {thread!r})" if thread else "")
        print(
            f"nothing to preview: {where} on {platform} has no open session with bot "
            f"{conversation.bot} yet (write to it first)",
            file=sys.stderr,  # not the prompt: `personabot prompt > file` stays empty
        )
        return 1
    return _print_prompt(out, *preview)


def _show(out: TextIO, text: str = "") -> None:
    """Print stored text (messages, a card's prompt, remembered facts) as text: never an
    escape sequence a model or a card slipped in (bot.core.terminal)."""
    print(safe_for_terminal(text), file=out)


def _print_prompt(out: TextIO, title: str, assembled: Assembled) -> int:
    """A prompt layer by layer, with token estimates and cache breakpoints."""
    request = assembled.request
    _show(out, f"{title} (model {request.model})")
    for name, tokens in assembled.breakdown:
        _show(out, f"  {name:<8} ~{tokens:>6} tokens")
    _show(out, f"  {'total':<8} ~{assembled.total_tokens:>6} tokens\n")
    if assembled.lore is not None:
        _print_lore(out, assembled.lore)
    for i, block in enumerate(request.system):
        mark = "  [cache breakpoint]" if block.cache else ""
        _show(out, f"--- system block {i}{mark}\n{block.text}")
    for message in request.messages:
        mark = "  [cache breakpoint]" if any(b.cache for b in message.blocks) else ""
        shown = [b for b in message.blocks if isinstance(b, ImageBlock)]
        if shown:
            sizes = ", ".join(f"{b.media_type} {len(b.data) // 1024} KB" for b in shown)
            mark += f"  [{len(shown)} image(s): {sizes}]"
        _show(out, f"--- {message.role}{mark}\n{message.text}")
    if request.tools:
        names = ", ".join(t.name for t in request.tools)
        _show(out, f"--- tools ({request.tool_choice}): {names}")
    return 0


def _print_lore(out: TextIO, lore: LoreSelection) -> None:
    """Which lorebook entries fired, which were left out, and why (docs/personas.md)."""
    _show(out, "lorebook:")
    for fired in lore.fired:
        _show(out, f"  fired    {fired.label!r}: {fired.why} (~{fired.tokens} tokens)")
    listed, counted = lore.listed()
    for skipped in listed:
        detail = f" ({skipped.detail})" if skipped.detail else ""
        _show(out, f"  skipped  {skipped.label!r}: {skipped.reason}{detail}")
    if counted:
        _show(out, f"  skipped  {counted} more entries: no key match")
    _show(out)


async def user_memory(app: App, out: TextIO, *, action: str, platform: str, user: str) -> int:
    """``memory show`` or ``memory forget`` for one user (of a platform personabot knows: a
    typo answered "nothing is remembered", exit 0, as if the person were forgotten)."""
    known = sorted(BUILT_IN_PLATFORMS | {b.platform for b in app.settings.bots})
    if platform not in known:
        close = difflib.get_close_matches(platform, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            [f"--platform: {platform!r} is not a platform{hint}; known: {', '.join(known)}"]
        )
    key = UserKey(platform, user)
    async with app.open_memory() as (_, memory):
        record = await memory.user_memory(key)
        if action == "show":
            _show(
                out,
                record.render(f"user {user} on {platform}")
                if record.items
                else f"nothing is remembered about user {user} on {platform}",
            )
            return 0
        # The same erasure as the person's own /forget (docs/privacy.md), so an operator
        # handling a deletion request removes what /forget would: reminders, time zone and,
        # with forget_deletes_messages, their messages and the replies to them.
        report = await memory.erase(
            key, delete_messages=app.settings.retention.forget_deletes_messages
        )
        print(f"erased {report.items} item(s) about user {user} on {platform}", file=out)
        print(f"deleted {report.reminders} reminder(s) and the time zone setting", file=out)
        e = report.erasure
        if e is None:
            print("messages kept (retention.forget_deletes_messages is off)", file=out)
        else:
            print(
                f"deleted {e.messages} message(s), {e.replies} repl(ies) to them only, "
                f"{e.outbox} outbox row(s), {e.summaries} summar(ies); kept {e.shared_replies} "
                f"shared repl(ies) and {e.pending} message(s) awaiting an answer",
                file=out,
            )
        return 0


async def retention_run(app: App, out: TextIO, *, dry_run: bool) -> int:
    """``retention run``: apply the policy now (or only report, with --dry-run)."""
    clock = SystemClock()
    async with app.open_memory(app.build_llm(offline_fallback=True)) as (store, memory):
        report = await build_retention(app.settings, store, memory, clock).run_once(dry_run=dry_run)
    if report.skipped:
        print(f"retention skipped: {report.skipped}", file=out)
        return 0
    verb = "would delete" if dry_run else "deleted"
    for line in report.lines:
        print(line, file=out)
    print(
        f"{verb} {report.deleted_messages} message(s); {report.expired_sessions} "
        f"session(s) expired",
        file=out,
    )
    return 0


async def retention_audit(
    app: App, out: TextIO, *, days: float | None, mode: str | None, as_json: bool
) -> int:
    """``retention audit``: sessions that would lose turns no summary covers; exit 3 if any."""
    settings = app.settings
    configured = settings.retention
    policy = RetentionPolicy(
        mode="message" if (mode or configured.mode) == "message" else "session",
        days=configured.days if days is None else days,
        batch_size=configured.batch_size,
    )
    clock = SystemClock()
    async with app.open_memory(OfflineLLM()) as (store, memory):
        risks = await build_retention(settings, store, memory, clock).audit(policy)
    if as_json:
        rows = [
            {
                "conversation": str(r.session.conversation),
                "session": r.session.session_id,
                "first_turn": r.first_turn,
                "last_turn": r.last_turn,
                "age_days": round(r.age_days, 1),
                "reason": r.reason,
            }
            for r in risks
        ]
        print(json.dumps({"mode": policy.mode, "days": policy.days, "at_risk": rows}), file=out)
    else:
        print(
            f"retention audit (mode {policy.mode}, {policy.days:g} days): "
            f"{len(risks)} session(s) at risk",
            file=out,
        )
        for r in risks:
            print(
                f"  {r.session}: turns {r.first_turn}-{r.last_turn}, "
                f"{r.age_days:.0f} days old: {r.reason}",
                file=out,
            )
    return 3 if risks else 0


async def db_command(app: App, out: TextIO, action: str, args: object) -> int:
    """``db migrate`` and ``db backup PATH``."""
    store = build_store(app.settings)
    async with store:
        if action == "migrate":
            print(f"schema is at version {await store.schema_version()}", file=out)
            return 0
        if not isinstance(store, SQLiteStore):
            raise ConfigError(["db backup: only for SQLite; back up PostgreSQL with pg_dump"])
        target = getattr(args, "path")  # noqa: B009 - argparse namespace
        await store.backup(target)
    print(f"backed up {store.path} to {target}", file=out)
    return 0


__all__ = ["db_command", "retention_audit", "retention_run", "show_prompt", "user_memory"]


async def serve_console(app: App, listen: str) -> int:
    """``personabot web``: the operator console alone (docs/web.md), until SIGINT/SIGTERM;
    another process may run the bots on the same store."""
    from bot.app.web import console_token

    console_token(app.settings, app.secrets)  # refused before the store is opened
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stopping() -> None:
        stop.set()
        app.give_up_starting()  # a plugin's lifespan still starting in the playground

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping)
    try:
        return await _console_until(app, listen, stop)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or not app.start_given_up:
            raise
        task.uncancel()  # stopped while starting: what had opened closed again
        return 0


async def _console_until(app: App, listen: str, stop: asyncio.Event) -> int:
    """The console (and its playground's runtime) until ``stop``."""
    from bot.app.web import console
    from bot.app.web.playground import playground

    clock = SystemClock()
    async with (
        app.open_memory() as (store, memory),
        playground(app, store) as try_out,
        console(
            app.settings,
            app.secrets,
            store=store,
            memory=memory,
            clock=clock,
            listen=listen,
            playground=try_out,
        ) as web,
    ):
        print(f"personabot console on http://{listen.rpartition(':')[0]}:{web.port}", flush=True)
        await stop.wait()
    return 0
