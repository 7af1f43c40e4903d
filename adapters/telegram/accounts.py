"""A scene's persona accounts on Telegram: one send-only bot account per persona
(``[bots.scene] accounts``, docs/scenes.md#platforms), so that Bob's lines come from Bob.

The bot's own account receives every update and owns the chat (commands, typing, previews);
a persona's account only calls ``getMe`` once and sends its persona's lines. The adapter
(adapters/telegram/adapter.py) asks :meth:`PersonaAccounts.speaker` which account may post a
line into a chat, sends through it in the chat's one pacer turn, and reports what Telegram
refused (:meth:`PersonaAccounts.rejected`, :meth:`PersonaAccounts.absent`); every line an
account cannot post goes out under the persona's bold name header on the bot's own account.

Invariants:
- an account never polls, sets a webhook or commands: nothing but ``getMe`` and sends;
- its token stays in its own :class:`~adapters.telegram.session.RedactingSession` (scrubbed
  from every error) and is never named: logs and errors name the persona;
- an account's user id is its token's numeric prefix, known before ``getMe`` answered: a reply
  to a message it posted (in an earlier process, too) addresses its persona whatever the
  account's state now (:attr:`PersonaAccounts.voices`);
- only groups: in a private chat the person talks to the bot's own account, and a persona
  account "posting" there would write into another dialog (the person's chat with that bot);
- a token Telegram rejects (401) is never used again by this process; a ``getMe`` that failed
  otherwise (network, 5xx, 429) is tried again, at most every :data:`IDENTIFY_RETRY` seconds;
- an account that is not a member of a group is not tried there again for
  :data:`ABSENT_RECHECK` seconds (it may be added meanwhile), and the group is told so once
  per persona per process (:meth:`PersonaAccounts.absent` answers True once).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramUnauthorizedError,
)
from aiogram.utils.token import TokenValidationError

from adapters.telegram.session import RedactingSession
from bot.core.errors import AdapterError, ConfigError

log = logging.getLogger("personabot.telegram")

#: Seconds before an account whose ``getMe`` failed (not with 401) is identified again.
IDENTIFY_RETRY: Final = 60.0
#: Seconds before an account found not to be a member of a group is tried there again.
ABSENT_RECHECK: Final = 600.0
#: Groups remembered per account as "not a member" (the oldest forgotten first).
_ABSENT_CHATS: Final = 4096
#: What Telegram answers a bot that cannot post into a group because it is not in it.
_NOT_MEMBER: Final = ("not a member", "was kicked", "chat not found")

Unusable = Literal["rejected", "absent"]
#: The adapter's time source (seconds; monotonic unless a test's clock is given).
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class AccountToken:
    """A persona's own account as configured: the persona's id and name, and its token."""

    persona: str
    name: str
    token: str


class AccountUnusable(AdapterError):
    """A persona account could not post (its token rejected, or not a member of the chat):
    nothing was sent, so the line may go out on the bot's own account instead."""

    def __init__(self, why: Unusable) -> None:
        super().__init__(f"persona account unusable: {why}")
        self.why: Unusable = why


def unusable(exc: TelegramAPIError) -> Unusable | None:
    """Why a persona account's send failed, when it says the account cannot post at all."""
    if isinstance(exc, TelegramUnauthorizedError):
        return "rejected"
    if isinstance(exc, TelegramForbiddenError | TelegramBadRequest) and any(
        reason in exc.message.lower() for reason in _NOT_MEMBER
    ):
        return "absent"
    return None


class PersonaAccount:
    """One persona's send-only bot account."""

    def __init__(
        self, spec: AccountToken, *, bot_key: str, server: TelegramAPIServer, now: Clock
    ) -> None:
        self.persona = spec.persona
        self.name = spec.name
        self.session = RedactingSession(api=server)
        self.session.now = now
        try:
            self.bot = Bot(spec.token, session=self.session)
        except TokenValidationError:
            raise ConfigError(
                [f"bots ({bot_key}).scene.accounts.{spec.persona}: the token is malformed"]
            ) from None
        #: The account's @username, once ``getMe`` answered (None: not usable yet).
        self.username: str | None = None
        #: Telegram rejected the token (401): never used again by this process.
        self.rejected = False
        self.identify_after = 0.0
        # chat id -> when the account may be tried there again (it was not a member).
        self.absent_until: OrderedDict[int, float] = OrderedDict()

    @property
    def user_id(self) -> int:
        """The account's Telegram user id (its token's numeric prefix)."""
        return self.bot.id


class PersonaAccounts:
    """The persona accounts of one Telegram bot: which may post where, and what went wrong."""

    def __init__(
        self,
        specs: Sequence[AccountToken],
        *,
        bot_key: str,
        own_token: str,
        server: TelegramAPIServer,
        now: Clock,
    ) -> None:
        self._bot_key = bot_key
        self._now = now
        tokens = [spec.token for spec in specs]
        where = f"bots ({bot_key}).scene.accounts"
        for spec in specs:
            if spec.token == own_token:
                raise ConfigError([f"{where}.{spec.persona}: the bot's own token, not its own"])
            if tokens.count(spec.token) > 1:
                raise ConfigError([f"{where}.{spec.persona}: the same token as another persona"])
        # A malformed token raises here; aiogram's sessions open no connection before their
        # first request, so the accounts built before it need no closing.
        self._accounts = {
            spec.persona: PersonaAccount(spec, bot_key=bot_key, server=server, now=now)
            for spec in specs
        }
        # (persona, chat) pairs told to add the account: once per process.
        self._noticed: set[tuple[str, int]] = set()

    @property
    def voices(self) -> Mapping[int, str]:
        """User id -> persona name of every account (the inbound rules' ``voices``)."""
        return {a.user_id: a.name for a in self._accounts.values()}

    @property
    def tokens(self) -> tuple[str, ...]:
        """The accounts' tokens, for scrubbing errors (never to be shown)."""
        return tuple(a.bot.token for a in self._accounts.values())

    async def identify(self) -> None:
        """``getMe`` of every account at once; a failure is logged and leaves that persona
        on the header (never fatal: the bot runs with or without its personas' accounts)."""
        await asyncio.gather(*(self._identify(a) for a in self._accounts.values()))

    async def _identify(self, account: PersonaAccount) -> None:
        # Two lines of one persona may both find the account unidentified and both ask:
        # getMe is idempotent, the later answer only sets the same username again.
        try:
            me = await account.bot.me()
        except TelegramUnauthorizedError:
            self.rejected(account)
            return
        except (TelegramAPIError, ClientDecodeError) as exc:
            account.identify_after = self._now() + IDENTIFY_RETRY
            log.warning(
                "telegram bot %s: the account of persona %s could not be identified (%s); "
                "its lines carry its name until it can",
                self._bot_key,
                account.persona,
                exc.message if isinstance(exc, TelegramAPIError) else "unreadable answer",
            )
            return
        account.username = me.username or str(me.id)
        log.info(
            "telegram bot %s: persona %s speaks as @%s", self._bot_key, account.persona, me.username
        )

    async def speaker(self, persona: str, chat_id: int) -> PersonaAccount | None:
        """The account that posts ``persona``'s line into the chat, or None (the header)."""
        account = self._accounts.get(persona)
        if account is None or account.rejected or chat_id > 0:
            return None
        now = self._now()
        if account.username is None:
            if now < account.identify_after:
                return None
            await self._identify(account)
            if account.username is None:
                return None
        until = account.absent_until.get(chat_id)
        if until is not None and now < until:
            return None
        return account

    def rejected(self, account: PersonaAccount) -> None:
        """Telegram rejected the account's token (401): the header from now on."""
        if not account.rejected:
            log.error(
                "telegram bot %s: Telegram rejected the token of persona %s's account; its "
                "lines carry its name on the bot's own account (check scene.accounts.%s)",
                self._bot_key,
                account.persona,
                account.persona,
            )
        account.rejected = True

    def absent(self, account: PersonaAccount, chat_id: int) -> bool:
        """The account is not a member of the chat: not tried there for a while. True the
        first time for this persona and chat in this process (the chat is to be told)."""
        account.absent_until[chat_id] = self._now() + ABSENT_RECHECK
        account.absent_until.move_to_end(chat_id)
        while len(account.absent_until) > _ABSENT_CHATS:
            account.absent_until.popitem(last=False)
        first = (account.persona, chat_id) not in self._noticed
        self._noticed.add((account.persona, chat_id))
        if first:
            log.warning(
                "telegram bot %s: persona %s's account @%s is not a member of chat %s; its "
                "lines there carry its name on the bot's own account",
                self._bot_key,
                account.persona,
                account.username,
                chat_id,
            )
        return first

    def notice(self, account: PersonaAccount) -> str:
        """What a group is told when the persona's account is not in it."""
        return (
            f"Add @{account.username} to this group so {account.name} can speak for itself; "
            "until then the names are shown in bold."
        )

    async def aclose(self) -> None:
        """Close every account's HTTP session."""
        for account in self._accounts.values():
            await account.session.close()
