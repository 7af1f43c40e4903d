"""A fast local token estimate that errs on the high side."""

from __future__ import annotations

from typing import Final

# Claude averages roughly 3.5-4 characters per token on English and fewer on other scripts;
# counting UTF-8 bytes / 3 overestimates both, which keeps prompts under budget.
_BYTES_PER_TOKEN: Final = 3
_PER_MESSAGE_OVERHEAD: Final = 4


def estimate_tokens(text: str) -> int:
    """Estimated tokens of a text (never below the real count for typical input)."""
    return -(-len(text.encode("utf-8")) // _BYTES_PER_TOKEN) + _PER_MESSAGE_OVERHEAD


def image_tokens(width: int, height: int) -> int:
    """PLACEHOLDER until img15 lands."""
    return -(-(width * height) // 750)
