"""What adapters that show a reply while it is written share (docs/architecture.md#streaming).

:class:`StreamingAdapter` is an adapter that implements ``bot.core.ports.Streams``; it says
the one rule every platform keeps (``stream = "off"`` shows nothing) and leaves the rest to
the platform. :class:`PostedPreview` is what every preview that is a real message, posted once
and edited in place, answers about itself (Telegram groups, Discord).
"""

from __future__ import annotations

import abc
from typing import Literal

from adapters.base import BaseAdapter
from bot.core.events import ConversationKey
from bot.core.ports import Preview, StreamSettings


class StreamingAdapter(BaseAdapter):
    """An adapter that can show a reply while it is written (``bot.core.ports.Streams``)."""

    def preview(
        self,
        conversation: ConversationKey,
        settings: StreamSettings,
        *,
        reply_to: str | None = None,
        draft_id: int | None = None,
    ) -> Preview | None:
        """A preview for one generation in ``conversation``, or None: never with mode
        ``off``; else as the platform decides (:meth:`_open_preview`). ``draft_id``: the
        draft of a cut generation to continue, where previews are drafts."""
        if settings.mode == "off":
            return None
        return self._open_preview(conversation, settings, reply_to, draft_id)

    @abc.abstractmethod
    def _open_preview(
        self,
        conversation: ConversationKey,
        settings: StreamSettings,
        reply_to: str | None,
        draft_id: int | None,
    ) -> Preview | None:
        """The platform's preview under ``settings`` (mode is not ``off``), or None."""

    @abc.abstractmethod
    async def retract(self, conversation: ConversationKey, message_id: str) -> bool:
        """Delete a posted preview a cut or crashed generation left behind; never raises.
        False: worth trying again later; True: gone, or never deletable."""


class PostedPreview:
    """A preview that is a real message: posted by the first update, edited by the later ones.

    Subclasses keep the posted message's id in ``_message_id`` (None until it is posted).
    """

    _message_id: int | None = None

    @property
    def kind(self) -> Literal["edit"]:
        """A real message, edited in place."""
        return "edit"

    @property
    def draft_id(self) -> None:
        """A posted message has no stop button."""
        return None

    @property
    def message_id(self) -> str | None:
        """The posted message (None until the first update posted it)."""
        return None if self._message_id is None else str(self._message_id)
