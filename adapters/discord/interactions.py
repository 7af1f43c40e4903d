"""Discord interactions: application commands in, their answers out (docs/discord.md#7-commands).

An application command becomes the ``Inbound`` of the typed command it stands for
(``/persona name:Ada`` -> ``/persona Ada``, ``command_only``), with the platform message id
``i<interaction id>``: the router runs it with the same access check and handler as a typed
command, never stores it, and its dedupe by platform message id (``store.answered``) runs an
interaction delivered twice once, in whichever process. Its answer comes back through
Delivery as a reply to that id, and only this module may send it: through the interaction
(the first answer its response, later ones followups), ephemeral when the command's answers
are about one person or the answer is a refusal. An id this process holds no interaction for
(a restart: the token lived in memory only) is never posted in the channel instead: the
answer could be someone's /memory.

Discord waits 3 s for a response. An interaction whose answer is not ready ``ACK_WITHIN``
seconds after it arrived (on the adapter's clock) is deferred ("Mira is thinking..."; as
ephemeral as its answer will be) and its answer then edits that response. Autocomplete is
answered at once from ``NativeMenu.suggest`` (bounded by ``SUGGEST_WITHIN``), never queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import discord
from discord import app_commands

from adapters.discord.inbound import Place
from adapters.discord.preview import MESSAGE_LIMIT, NETWORK_ERRORS
from adapters.text import split_text
from bot.core.clock import Clock
from bot.core.errors import AdapterError
from bot.core.events import Inbound, Reply
from bot.core.menu import NativeCommand, NativeMenu, command_text
from bot.core.tasks import within

log = logging.getLogger("personabot.discord")

#: The prefix of an interaction's platform message id (a message id has none).
PREFIX: Final = "i"
#: Seconds after arrival an unanswered interaction is deferred (Discord waits 3 s).
ACK_WITHIN: Final = 2.0
#: Seconds autocomplete suggestions may take (Discord waits 3 s; it cannot be deferred).
SUGGEST_WITHIN: Final = 2.0
#: Interactions remembered after they arrived: their tokens live 15 minutes.
TOKEN_SECONDS: Final = 15 * 60
_REMEMBERED: Final = 1024
#: Option values longer than this are cut (Discord's own limit for text is 6000).
_VALUE_LIMIT: Final = 2000
#: Discord option types read here: subcommand, text, integer, number, boolean.
_SUB_COMMAND, _STRING, _INTEGER, _BOOLEAN, _NUMBER = 1, 3, 4, 5, 10

UNKNOWN_COMMAND: Final = "I don't know that command here. Type /help in the chat for the list."
NOT_SERVED: Final = "I don't answer in this server."

State = Literal["fresh", "deferred", "answered"]
FindPlace = Callable[[object, int, int | None], Awaitable[Place]]


def interaction_id(platform_message_id: str | None) -> int | None:
    """The interaction a reply answers (None: an ordinary message id)."""
    if platform_message_id and platform_message_id.startswith(PREFIX):
        rest = platform_message_id[len(PREFIX) :]
        return int(rest) if rest.isdigit() and len(rest) <= 20 else None
    return None


@dataclass(eq=False)
class Pending:
    """One interaction this process received: its state and its answers' visibility."""

    interaction: discord.Interaction[Any]
    private: bool
    arrived: float
    state: State = "fresh"
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    timer: asyncio.Task[None] | None = None


@dataclass(frozen=True, slots=True)
class Invocation:
    """What an application command's payload says, read defensively (forgeable input)."""

    name: str
    subcommand: str | None
    values: list[str]
    focused: tuple[str, str] | None  # autocomplete: (option, typed so far)


class Interactions:
    """The interactions of one bot account (see the module docstring)."""

    def __init__(
        self,
        *,
        bot_key: str,
        clock: Clock,
        place: FindPlace,
        allowed: Callable[[int | None], bool],
        ack_within: float = ACK_WITHIN,
    ) -> None:
        self._bot_key = bot_key
        self._clock = clock
        self._place = place
        self._allowed = allowed
        self._ack_within = ack_within
        self._pending: OrderedDict[int, Pending] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        self.menu: NativeMenu | None = None

    # ------------------------------------------------------------------ arrival

    def arrived(self, interaction: discord.Interaction[Any]) -> bool:
        """Note an application command as it is parsed (its 3 s run from now) and start its
        deferral timer; False for anything not to be queued (a repeat, another kind: an
        autocomplete is answered now, in a task of its own)."""
        if interaction.type == discord.InteractionType.autocomplete:
            self._spawn(self._autocomplete(interaction), f"discord autocomplete {interaction.id}")
            return False
        if interaction.type != discord.InteractionType.application_command:
            return False
        if interaction.id in self._pending:
            log.info("Discord interaction %d delivered again; answered once", interaction.id)
            return False
        command = self._command(_invocation(interaction.data))
        pending = Pending(interaction, command is None or command.private, self._clock.now())
        self._remember(interaction.id, pending)
        pending.timer = self._spawn(self._defer_late(pending), f"discord defer {interaction.id}")
        return True

    async def inbound(self, interaction: discord.Interaction[Any]) -> Inbound | None:
        """The typed command an application command stands for; None when it is answered
        here already (an unknown command, a server the bot does not serve)."""
        invocation = _invocation(interaction.data)
        if self._command(invocation) is None:
            await self._answer_now(interaction, UNKNOWN_COMMAND)
            return None
        if not self._allowed(interaction.guild_id):
            await self._answer_now(interaction, NOT_SERVED)
            return None
        assert invocation is not None
        text = command_text(invocation.name, invocation.subcommand, invocation.values)
        return await self._asker(interaction, text)

    async def handed_over(self, interaction_id_: int) -> None:
        """The router is done with it: a deferral not answered (nothing to say, or a
        repeat another process answered) is taken back rather than left "thinking"."""
        pending = self._pending.get(interaction_id_)
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        async with pending.lock:
            if pending.state == "deferred":
                with contextlib.suppress(discord.HTTPException, *NETWORK_ERRORS):
                    await pending.interaction.delete_original_response()
                pending.state = "answered"

    # ------------------------------------------------------------------ answers

    async def answer(self, reply: Reply) -> None:
        """Send a reply to an interaction through it (see the module docstring)."""
        key = interaction_id(reply.reply_to_platform_message_id)
        pending = None if key is None else self._pending.get(key)
        if pending is None or self._clock.now() - pending.arrived > TOKEN_SECONDS:
            raise AdapterError(
                f"the Discord interaction {reply.reply_to_platform_message_id} can no longer "
                "be answered (its token is gone); not posted in the channel instead"
            )
        await self._send(pending, reply.text, private=reply.private)

    async def _send(self, pending: Pending, text: str, *, private: bool) -> None:
        """The first answer is the response (or edits the deferred one), later ones are
        followups; ephemeral when the command's answers are, or this one is a refusal."""
        ephemeral = pending.private or private
        chunks = split_text(text, MESSAGE_LIMIT)
        interaction = pending.interaction
        none = discord.AllowedMentions.none()
        try:
            async with pending.lock:
                if pending.timer is not None:
                    pending.timer.cancel()
                first, rest = chunks[0], chunks[1:]
                if pending.state == "fresh":
                    await interaction.response.send_message(
                        first, ephemeral=ephemeral, allowed_mentions=none
                    )
                elif pending.state == "deferred":
                    await interaction.edit_original_response(content=first, allowed_mentions=none)
                else:
                    rest = chunks
                pending.state = "answered"
                for chunk in rest:
                    await interaction.followup.send(
                        chunk, ephemeral=ephemeral, allowed_mentions=none
                    )
        except discord.HTTPException as exc:
            raise AdapterError(f"Discord interaction {interaction.id} not answered: {exc}") from exc
        except NETWORK_ERRORS as exc:
            raise AdapterError(
                f"Discord interaction {interaction.id} not answered: {exc!r}"
            ) from exc

    async def _defer_late(self, pending: Pending) -> None:
        """Defer the interaction if it is still unanswered ``ack_within`` after it arrived."""
        await self._clock.sleep(self._ack_within)
        async with pending.lock:
            if pending.state != "fresh":
                return
            try:
                await pending.interaction.response.defer(ephemeral=pending.private, thinking=True)
            except (discord.HTTPException, *NETWORK_ERRORS) as exc:
                log.warning("Discord interaction %d not deferred: %s", pending.interaction.id, exc)
                return
            pending.state = "deferred"

    async def _answer_now(self, interaction: discord.Interaction[Any], text: str) -> None:
        """Answer here, for the asker only, what never reaches the router."""
        pending = self._pending.get(interaction.id)
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        try:
            await self._send(pending, text, private=True)
        except AdapterError as exc:
            log.warning("%s", exc)

    # ------------------------------------------------------------------ autocomplete

    async def _autocomplete(self, interaction: discord.Interaction[Any]) -> None:
        """Offer values for the focused option: only what the asker may see, fast (a slow or
        failing suggester offers nothing)."""
        choices: list[app_commands.Choice[Any]] = []
        try:
            choices = await self._choices(interaction)
        except TimeoutError:
            log.warning("suggestions for Discord interaction %d took too long", interaction.id)
        except Exception:
            log.exception("suggestions for Discord interaction %d failed", interaction.id)
        try:
            await interaction.response.autocomplete(choices[:25])
        except (discord.HTTPException, *NETWORK_ERRORS) as exc:
            log.info("Discord autocomplete %d not answered: %s", interaction.id, exc)

    async def _choices(
        self, interaction: discord.Interaction[Any]
    ) -> list[app_commands.Choice[Any]]:
        invocation = _invocation(interaction.data)
        command = self._command(invocation)
        menu = self.menu
        if menu is None or command is None or invocation is None or invocation.focused is None:
            return []
        if not self._allowed(interaction.guild_id):
            return []
        option, typed = invocation.focused
        integer = _option_kind(command, invocation, option) == "integer"
        asker = await self._asker(interaction, command_text(command.name, None, []))
        found = await within(
            self._clock, SUGGEST_WITHIN, menu.suggest(asker, command.name, option, typed)
        )
        return [
            app_commands.Choice(
                name=s.label[:100] or s.value, value=int(s.value) if integer else s.value
            )
            for s in found
            if not integer or (s.value.isdigit() and len(s.value) <= 18)
        ]

    # ------------------------------------------------------------------ helpers

    def _command(self, invocation: Invocation | None) -> NativeCommand | None:
        if invocation is None or self.menu is None:
            return None
        return next((c for c in self.menu.native_commands if c.name == invocation.name), None)

    async def _asker(self, interaction: discord.Interaction[Any], text: str) -> Inbound:
        """The Inbound of the person who invoked it, where they did."""
        channel_id = interaction.channel_id or 0
        place = await self._place(interaction.channel, channel_id, interaction.guild_id)
        user = interaction.user
        return Inbound(
            conversation=place.key(self._bot_key),
            author_id=str(user.id),
            display_name=user.display_name,
            text=text,
            platform_message_id=f"{PREFIX}{interaction.id}",
            is_private=place.is_private,
            triggers_reply=True,
            mentions_bot=True,
            command_only=True,
            # The person's own Discord language (docs/i18n.md).
            locale=interaction.locale.value,
        )

    def _remember(self, key: int, pending: Pending) -> None:
        self._pending[key] = pending
        while len(self._pending) > _REMEMBERED:
            self._pending.popitem(last=False)

    def _spawn(self, work: Awaitable[None], name: str) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def aclose(self) -> None:
        """Cancel the deferral timers and autocomplete answers still running."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _invocation(data: object) -> Invocation | None:
    """The command's name, its words in the order given, and the focused option; None when
    the payload is not one (a forged or unknown shape)."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    subcommand: str | None = None
    values: list[str] = []
    focused: tuple[str, str] | None = None
    options = data.get("options")
    first = options[0] if isinstance(options, list) and options else None
    if isinstance(first, dict) and first.get("type") == _SUB_COMMAND:
        if isinstance(first.get("name"), str):
            subcommand = first["name"]
        options = first.get("options")
    for option in options if isinstance(options, list) else []:
        if not isinstance(option, dict) or not isinstance(option.get("name"), str):
            continue
        value = option.get("value")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            continue
        text = " ".join(str(value).split())[:_VALUE_LIMIT]
        if option.get("focused") is True:
            focused = (option["name"], text)
        elif text:
            values.append(text)
    return Invocation(str(data["name"]).lower(), subcommand, values, focused)


def _option_kind(command: NativeCommand, invocation: Invocation, option: str) -> str:
    options = command.options
    if command.subcommands:
        sub = next((s for s in command.subcommands if s.name == invocation.subcommand), None)
        options = sub.options if sub is not None else ()
    found = next((o for o in options if o.name == option), None)
    return "text" if found is None else found.kind
