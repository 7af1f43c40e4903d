"""The offline model with plugins: it quotes the user's turn, never the bot's context layer."""

from __future__ import annotations

from bot.core.llm import ChatMessage, ImageBlock, ModelRequest, TextBlock, ToolSpec
from bot.llm.offline import OfflineLLM


async def test_offline_quotes_the_turn_and_ignores_tools() -> None:
    request = ModelRequest(
        model="offline",
        system=(TextBlock("You are Mira."),),
        messages=(
            ChatMessage(
                "user",
                (
                    TextBlock("<bot_context>\nIt is evening.\n</bot_context>"),
                    TextBlock("hello there"),
                ),
            ),
        ),
        layers=("persona", "context", "turn"),
        tools=(ToolSpec("dice", "Roll a die.", {"type": "object", "properties": {}}),),
    )
    result = await OfflineLLM().complete(request)
    assert result.text.startswith("[offline model] You said: hello there\n")
    assert "evening" not in result.text and "context, turn" in result.text
    assert result.tool_uses == () and result.stop_reason == "end_turn"


async def test_offline_says_how_many_images_the_turn_brought() -> None:
    """A console or offline user sees that the pictures they sent reached the model."""
    picture = ImageBlock("image/png", b"\x89PNG\r\n\x1a\n")
    request = ModelRequest(
        model="offline",
        system=(TextBlock("You are Mira."),),
        messages=(
            ChatMessage("user", (picture, TextBlock("an old one"))),
            ChatMessage.of("assistant", "Nice."),
            ChatMessage("user", (picture, picture, TextBlock("look at these"))),
        ),
        layers=("persona", "turn"),
    )
    result = await OfflineLLM().complete(request)
    assert result.text.splitlines()[:2] == [
        "[offline model] You said: look at these",
        "(I got 2 images)",
    ]
    one = await OfflineLLM().complete(
        ModelRequest(model="offline", system=(), messages=(ChatMessage("user", (picture,)),))
    )
    assert "(I got 1 image)" in one.text and "You said: (nothing)" in one.text
    plain = await OfflineLLM().complete(
        ModelRequest(model="offline", system=(), messages=(ChatMessage.of("user", "hi"),))
    )
    assert "image" not in plain.text
