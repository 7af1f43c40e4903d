"""The offline model with plugins: it quotes the user's turn, never the bot's context layer."""

from __future__ import annotations

from bot.core.llm import ChatMessage, ModelRequest, TextBlock, ToolSpec
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
