"""Token estimates for memory's budgets: the rules live in the core (bot/core/tokens.py), where
a model provider without usage reports can count with them too."""

from __future__ import annotations

from bot.core.tokens import MAX_IMAGE_TOKENS, estimate_tokens, image_tokens

__all__ = ["MAX_IMAGE_TOKENS", "estimate_tokens", "image_tokens"]
