"""Tools the model may call (Claude tool use): typed functions turned into JSON schemas.

A tool is registered by a plugin (``@app.tool``, docs/plugins.md). Its signature is the input
schema: every parameter needs a type annotation; the docstring's first line is the description
unless one is given. A tool with ``side_effects=True`` must not act before its turn's reply is
recorded (docs/architecture.md#queue, the final check): the pipeline runs it only then.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

import pydantic

from bot.core.errors import ConfigError

ToolFunction = Callable[..., Awaitable[Any]]

_NAME = pydantic.TypeAdapter(pydantic.constr(pattern=r"^[a-zA-Z0-9_-]{1,64}$"))


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool: its name, what it does, its input schema and the function that runs it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    side_effects: bool
    run: ToolFunction
    arguments: type[pydantic.BaseModel] = field(repr=False, compare=False)

    @classmethod
    def from_function(
        cls,
        fn: ToolFunction,
        *,
        name: str | None = None,
        description: str | None = None,
        side_effects: bool = False,
    ) -> Tool:
        """A tool from an ``async def`` with annotated parameters; ConfigError when unusable."""
        tool_name = name or fn.__name__
        try:
            _NAME.validate_python(tool_name)
        except pydantic.ValidationError:
            raise ConfigError(
                [f"tool {tool_name!r}: a name is 1-64 letters, digits, '_' or '-'"]
            ) from None
        if not inspect.iscoroutinefunction(fn):
            raise ConfigError([f"tool {tool_name!r}: must be an async function"])
        hints = get_type_hints(fn)
        fields: dict[str, Any] = {}
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError([f"tool {tool_name!r}: *args and **kwargs cannot be typed"])
            if param.name not in hints:
                raise ConfigError(
                    [f"tool {tool_name!r}: parameter {param.name!r} needs a type annotation"]
                )
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (hints[param.name], default)
        model = pydantic.create_model(f"{tool_name}_arguments", **fields)
        schema = model.model_json_schema()
        schema.pop("title", None)
        text = description or (inspect.getdoc(fn) or "").split("\n\n")[0].strip()
        if not text:
            raise ConfigError([f"tool {tool_name!r}: give a description (or a docstring)"])
        return cls(tool_name, text, schema, side_effects, fn, model)


@dataclass(frozen=True, slots=True)
class ToolRegistry:
    """The tools a bot's model may call, by name."""

    tools: tuple[Tool, ...] = ()

    def get(self, name: str) -> Tool | None:
        """The tool of this name, if registered."""
        return next((t for t in self.tools if t.name == name), None)

    def with_tool(self, tool: Tool) -> ToolRegistry:
        """A registry with ``tool`` added; ConfigError when the name is taken."""
        if self.get(tool.name) is not None:
            raise ConfigError([f"tool {tool.name!r}: registered twice"])
        return ToolRegistry((*self.tools, tool))

    def __bool__(self) -> bool:
        return bool(self.tools)
