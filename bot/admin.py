"""Operator commands that read or change stored data: prompt preview, user memory."""

from __future__ import annotations

from typing import TextIO

from bot.app import build_store, memory_policy, pin_for
from bot.clock import SystemClock
from bot.config import PersonaSettings, Settings
from bot.errors import ConfigError
from bot.events import ConversationKey, StoredMessage, Turn, UserKey
from bot.llm.offline import OfflineLLM
from memory.service import Memory


def _bot_for(settings: Settings, platform: str, bot: str | None) -> tuple[str, PersonaSettings]:
    """The bot key and persona of a conversation on ``platform``."""
    if platform == "console":
        persona = settings.persona(None)
        for p in settings.personas:
            if bot in (p.id, f"console-{p.id}"):
                persona = p
        return f"console-{persona.id}", persona
    entries = [b for b in settings.bots if b.platform == platform and bot in (None, b.key)]
    if not entries:
        raise ConfigError([f"--bot: no [[bots]] entry for platform {platform!r} named {bot!r}"])
    if len(entries) > 1:
        names = ", ".join(b.key for b in entries)
        raise ConfigError([f"--bot: several {platform} bots ({names}); name one with --bot"])
    return entries[0].key, settings.persona(entries[0].persona)


async def show_prompt(
    settings: Settings,
    out: TextIO,
    *,
    platform: str,
    chat: str,
    thread: str | None,
    bot: str | None,
) -> int:
    """Print the prompt the model would get now, layer by layer with token estimates."""
    key, persona = _bot_for(settings, platform, bot)
    conversation = ConversationKey(platform, chat, thread, key)
    policy = memory_policy(settings, persona)
    clock = SystemClock()
    async with build_store(settings) as store:
        session = await store.current_session(conversation)
        if session is None:
            print(f"no open session for {conversation}", file=out)
            return 1
        turn = await store.pending_turn(conversation)
        if turn is None:
            # No input pending: preview with a placeholder from the last person who spoke.
            users = [m for m in await store.messages(session.key) if m.role == "user"]
            author, name, private = (
                (users[-1].author_id, users[-1].display_name, users[-1].is_private)
                if users
                else ("?", "?", True)
            )
            placeholder = StoredMessage(
                0,
                session.key,
                0,
                "user",
                author,
                name,
                "(the next message)",
                clock.now(),
                is_private=private,
            )
            turn = Turn(session.key, 0, (placeholder,), clock.now())
        memory = Memory(store=store, llm=OfflineLLM(), clock=clock, policy_for=lambda _: policy)
        assembled = await memory.build(turn, pin_for(persona))
    request = assembled.request
    print(f"prompt for {turn.session} (model {request.model})", file=out)
    for name, tokens in assembled.breakdown:
        print(f"  {name:<8} ~{tokens:>6} tokens", file=out)
    print(f"  {'total':<8} ~{assembled.total_tokens:>6} tokens\n", file=out)
    for i, block in enumerate(request.system):
        mark = "  [cache breakpoint]" if block.cache else ""
        print(f"--- system block {i}{mark}\n{block.text}", file=out)
    for message in request.messages:
        mark = "  [cache breakpoint]" if any(b.cache for b in message.blocks) else ""
        print(f"--- {message.role}{mark}\n{message.text}", file=out)
    return 0


async def user_memory(
    settings: Settings, out: TextIO, *, action: str, platform: str, user: str
) -> int:
    """``memory show`` or ``memory forget`` for one user."""
    key = UserKey(platform, user)
    clock = SystemClock()
    async with build_store(settings) as store:
        policy = memory_policy(settings, settings.persona(None))
        memory = Memory(store=store, llm=OfflineLLM(), clock=clock, policy_for=lambda _: policy)
        record = await memory.user_memory(key)
        if action == "show":
            print(
                record.render(f"user {user} on {platform}")
                if record.items
                else f"nothing is remembered about user {user} on {platform}",
                file=out,
            )
            return 0
        await memory.forget(key)
        print(f"erased {len(record.items)} item(s) about user {user} on {platform}", file=out)
        return 0


__all__ = ["show_prompt", "user_memory"]
