"""Turn hooks (docs/plugins.md): before the model request and after the reply was recorded.

A hook that raises or runs out of time is logged (by its type and place, never its message,
which may hold personal data) and skipped: a plugin never fails a turn.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from bot.core.clock import Clock
from bot.core.tasks import within
from bot.core.visible import has_visible_text
from bot.runtime.extensions import AfterReply, BeforeModel, TurnContext
from bot.runtime.tools import raised_at

log = logging.getLogger("personabot.hooks")


async def context_layers(
    hooks: Sequence[BeforeModel], context: TurnContext, *, clock: Clock, seconds: float
) -> tuple[str, ...]:
    """The extra prompt layers ``before_model`` hooks give for this turn, in hook order."""
    layers = []
    for hook in hooks:
        try:
            text: object = await within(clock, seconds, hook(context))
        except TimeoutError:
            log.warning("%s: before_model hook %s timed out; skipped", context.session, _name(hook))
            continue
        except Exception as exc:  # a plugin's bug must not fail the turn
            log.warning(
                "%s: before_model hook %s raised %s at %s; skipped",
                context.session,
                _name(hook),
                type(exc).__name__,
                raised_at(exc),
            )
            continue
        if text is not None and not isinstance(text, str):
            log.warning(
                "%s: before_model hook %s returned %s, not text; skipped",
                context.session,
                _name(hook),
                type(text).__name__,
            )
        elif text is not None and has_visible_text(text):
            layers.append(text)
    return tuple(layers)


async def after_reply(
    hooks: Sequence[AfterReply],
    context: TurnContext,
    reply: str,
    *,
    clock: Clock,
    seconds: float,
) -> None:
    """Run the ``after_reply`` hooks for a recorded reply, one after the other."""
    for hook in hooks:
        try:
            await within(clock, seconds, hook(context, reply))
        except TimeoutError:
            log.warning("%s: after_reply hook %s timed out", context.session, _name(hook))
        except Exception as exc:  # a plugin's bug must not fail the turn
            log.warning(
                "%s: after_reply hook %s raised %s at %s",
                context.session,
                _name(hook),
                type(exc).__name__,
                raised_at(exc),
            )


def _name(hook: object) -> str:
    return str(getattr(hook, "__qualname__", None) or type(hook).__name__)
