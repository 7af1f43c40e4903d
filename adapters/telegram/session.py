"""The HTTP session of a Telegram bot: requests whose failures never carry the token.

The bot token is part of every request URL, so any transport error may quote it:
:class:`RedactingSession` re-raises each failure with the token scrubbed (:func:`scrub`), and
remembers whether Telegram answered the last request (the adapter's ``connected`` and
``last_problem``, for /readyz and the console).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final
from urllib.parse import quote

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramNetworkError,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.methods.base import Response, TelegramMethod, TelegramType

from adapters.telegram.responses import response_type
from bot.core.events import PlatformProblem

REDACTED: Final = "[redacted]"


def scrub(text: str, token: str) -> str:
    """``text`` with the token (plain, URL-quoted, or its secret half) replaced."""
    secret = token.split(":", 1)[-1]
    for needle in (token, quote(token, safe=""), secret):
        if len(needle) >= 8:
            text = text.replace(needle, REDACTED)
    return text


class RedactingSession(AiohttpSession):
    """aiogram's aiohttp session; errors it raises never carry the token in the request URL.

    It also remembers whether Telegram answered the last request (``reachable``) and the
    last failure that made it unreachable (``problem``, the token scrubbed; ``now`` dates it).
    """

    reachable = True
    problem: PlatformProblem | None = None
    now: Callable[[], float] = staticmethod(time.time)

    def check_response(
        self,
        bot: Bot,
        method: TelegramMethod[TelegramType],
        status_code: int,
        content: str,
    ) -> Response[TelegramType]:
        """aiogram's reading of an answer, its model class kept alive (responses.py)."""
        response_type(method.__returning__)
        return super().check_response(bot, method, status_code, content)

    async def make_request(
        self,
        bot: Bot,
        method: TelegramMethod[TelegramType],
        timeout: int | None = None,  # noqa: ASYNC109 - aiogram's signature
    ) -> TelegramType:
        """Make the request; re-raise failures with the token scrubbed."""
        try:
            result = await super().make_request(bot, method, timeout)
        except TelegramNetworkError as exc:
            self._unreachable(method, scrub(exc.message, bot.token))
            # ``from None``: the chained aiohttp error may quote the URL, token included.
            raise TelegramNetworkError(method, scrub(exc.message, bot.token)) from None
        except TelegramAPIError as exc:  # an answer (from Telegram or a proxy) with an error
            exc.message = scrub(exc.message, bot.token)
            # A server error, or a token Telegram no longer takes (revoked): the bot cannot
            # work; nor when its polling is refused (409: the token polled by another process
            # or a webhook still set; review 35b). A refused chat or a flood limit on a send is
            # about one request, not the connection.
            self.reachable = True
            refused = isinstance(exc, TelegramServerError | TelegramUnauthorizedError)
            if refused or getattr(method, "__api_method__", None) == "getUpdates":
                self._unreachable(method, f"{type(exc).__name__}: {exc.message}")
            raise
        except ClientDecodeError as exc:
            detail = scrub(str(exc), bot.token)
            self._unreachable(method, f"the answer could not be read: {detail}")
            raise ClientDecodeError("Failed to decode object", ValueError(detail), "") from None
        except Exception as exc:  # e.g. yarl's ValueError for a malformed api_server URL
            detail = scrub(f"{type(exc).__name__}: {exc}", bot.token)
            self._unreachable(method, detail)
            raise TelegramNetworkError(method, detail) from None
        self.reachable = True
        return result

    def _unreachable(self, method: TelegramMethod[TelegramType], detail: str) -> None:
        """Not connected, and why (``detail`` is already scrubbed of the token)."""
        self.reachable = False
        name = getattr(method, "__api_method__", type(method).__name__)
        self.problem = PlatformProblem(f"{name} failed: {detail}"[:500], self.now())
