"""The model as memory's background tasks call it: only when the limits of the people whose
messages it reads allow, and every answered call charged to them (docs/architecture.md#commands)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.events import ConversationKey, StoredMessage
from bot.core.llm import BaseLLM, ModelRequest, ModelResult
from bot.core.shares import weights


class ModelAccount(Protocol):
    """Limits and bookkeeping of memory tasks' model calls (bot.runtime.usage.Accounting)."""

    async def allow(self, conversation: ConversationKey, authors: Sequence[str]) -> bool:
        """Whether a task over these people's messages may call the model now."""

    async def charge(
        self,
        conversation: ConversationKey,
        purpose: str,
        result: ModelResult,
        by: Mapping[str, int],
        requested: str | None = None,
    ) -> None:
        """Record an answered call, split between people by these weights (priced as the
        ``requested`` model when the one that answered has no price)."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ChargedModel:
    """Memory tasks' model calls, allowed and charged by ``account`` (None: unlimited, free)."""

    llm: BaseLLM
    account: ModelAccount | None = None

    async def allowed(
        self, conversation: ConversationKey, messages: Sequence[StoredMessage]
    ) -> bool:
        """Whether a task over these messages may call the model now (their authors' limits)."""
        if self.account is None:
            return True
        return await self.account.allow(conversation, list(weights(messages)))

    async def complete(
        self,
        conversation: ConversationKey,
        purpose: str,
        request: ModelRequest,
        messages: Sequence[StoredMessage],
    ) -> ModelResult:
        """The model's answer, charged to the authors of ``messages`` by their share of it
        (ModelError when the call failed: nothing is charged)."""
        result = await self.llm.complete(request)
        if self.account is not None:
            await self.account.charge(
                conversation, purpose, result, weights(messages), request.model
            )
        return result
