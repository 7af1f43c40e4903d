"""Fast local token estimates: text (errs on the high side) and images (the Messages API's own
rule). Memory budgets prompts with them (memory/tokens.py); a provider whose endpoint reports no
usage charges by them (bot/llm/openai.py)."""

from __future__ import annotations

import math
from typing import Final

# Claude averages roughly 3.5-4 characters per token on English and fewer on other scripts;
# counting UTF-8 bytes / 3 overestimates both, which keeps prompts under budget.
_BYTES_PER_TOKEN: Final = 3
_PER_MESSAGE_OVERHEAD: Final = 4


def estimate_tokens(text: str) -> int:
    """Estimated tokens of a text (never below the real count for typical input)."""
    return -(-len(text.encode("utf-8")) // _BYTES_PER_TOKEN) + _PER_MESSAGE_OVERHEAD


# The Messages API's rule for images: one token per 750 pixels, after it has downscaled the
# image (keeping the aspect ratio) to at most 1568 px on the long edge and "about 1,600
# tokens". Its table of sizes it does not scale goes up to 784x1568 (1,639 tokens), so that
# many pixels are allowed here: the estimate may be a few tokens high, never low.
_IMAGE_PIXELS_PER_TOKEN: Final = 750
_IMAGE_LONG_EDGE: Final = 1568
_IMAGE_MAX_PIXELS: Final = 1568 * 784
#: The most one image costs (an image of unknown size is budgeted at this).
MAX_IMAGE_TOKENS: Final = -(-_IMAGE_MAX_PIXELS // _IMAGE_PIXELS_PER_TOKEN)


def image_tokens(width: int, height: int) -> int:
    """Input tokens the Messages API charges for an image of ``width`` x ``height`` px."""
    if width < 1 or height < 1:
        raise ValueError(f"image_tokens: no pixels in {width}x{height}")
    scale = min(
        1.0,
        _IMAGE_LONG_EDGE / max(width, height),
        math.sqrt(_IMAGE_MAX_PIXELS / (width * height)),
    )
    if scale < 1.0:
        width, height = max(1, math.floor(width * scale)), max(1, math.floor(height * scale))
    return -(-(width * height) // _IMAGE_PIXELS_PER_TOKEN)
