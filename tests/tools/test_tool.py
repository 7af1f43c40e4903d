"""Tools from typed functions: the schema the model sees and what a plugin author gets wrong."""

from __future__ import annotations

from typing import Literal

import pytest

from bot.core.errors import ConfigError
from bot.runtime.extensions import TurnContext
from bot.runtime.tools import Tool, ToolRegistry


async def roll(sides: int, times: int = 1, how: Literal["sum", "each"] = "sum") -> str:
    """Roll dice.

    Longer text that is not the description.
    """
    return "4"


def test_the_signature_is_the_schema_and_the_docstring_the_description() -> None:
    tool = Tool.from_function(roll)
    assert tool.name == "roll" and tool.description == "Roll dice." and not tool.side_effects
    schema = tool.input_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["sides"]
    assert schema["additionalProperties"] is False  # unknown arguments are refused
    assert schema["properties"]["sides"]["type"] == "integer"
    assert schema["properties"]["times"]["default"] == 1
    assert schema["properties"]["how"]["enum"] == ["sum", "each"]
    assert tool.spec.input_schema is schema


def test_a_turn_context_parameter_is_hidden_from_the_model() -> None:
    async def remind(text: str, turn: TurnContext) -> None:
        """Set a reminder."""

    tool = Tool.from_function(remind, side_effects=True)
    assert tool.context_parameter == "turn"
    assert list(tool.input_schema["properties"]) == ["text"]


def test_name_and_description_can_be_given() -> None:
    tool = Tool.from_function(roll, name="dice", description="Roll some dice.")
    assert (tool.name, tool.description) == ("dice", "Roll some dice.")


async def _untyped(x) -> str:  # type: ignore[no-untyped-def]
    """Untyped."""
    return ""


async def _star(*args: int) -> str:
    """Star args."""
    return ""


async def _silent(x: int) -> str:
    return ""


def _sync(x: int) -> str:
    """Not async."""
    return ""


@pytest.mark.parametrize(
    ("fn", "name", "problem"),
    [
        (_untyped, None, "parameter 'x' needs a type annotation"),
        (_star, None, "*args and **kwargs cannot be typed"),
        (_silent, None, "give a description"),
        (_sync, None, "must be an async function"),
        (roll, "two words", "a name is 1-64 letters"),
        (roll, "x" * 65, "a name is 1-64 letters"),
    ],
)
def test_an_unusable_function_is_a_config_error(fn: object, name: str | None, problem: str) -> None:
    with pytest.raises(ConfigError, match="tool") as info:
        Tool.from_function(fn, name=name)  # type: ignore[arg-type]
    assert problem in str(info.value)


def test_a_name_is_registered_once() -> None:
    registry = ToolRegistry().with_tool(Tool.from_function(roll))
    assert registry.get("roll") is not None and registry.get("dice") is None
    assert [s.name for s in registry.schemas()] == ["roll"]
    with pytest.raises(ConfigError, match="registered twice"):
        registry.with_tool(Tool.from_function(roll))
