"""A model-provider plugin: ``provider = "parrot"`` repeats the last message, no network.

plugins = ["personabot_extras.parrot"]

[llm]
provider = "parrot"
options = { prefix = "Polly says:" }
"""

from __future__ import annotations

import pydantic

from bot.app import App
from bot.config import LLMSettings, Secrets
from bot.core.errors import ConfigError
from bot.core.llm import BaseLLM, ModelRequest, ModelResult, Usage
from bot.llm.offline import OfflineLLM


class ParrotOptions(pydantic.BaseModel):
    """``[llm] options`` of the parrot provider."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    prefix: str = "Polly says:"


class ParrotLLM(BaseLLM):
    """Answers with the last message of the request after a prefix."""

    name = "parrot"

    def __init__(self, options: ParrotOptions) -> None:
        self._prefix = options.prefix
        self._offline = OfflineLLM()  # summaries and memory tasks

    async def complete(self, request: ModelRequest) -> ModelResult:
        """The last line of the last message, repeated after the prefix."""
        if request.purpose != "reply":
            return await self._offline.complete(request)
        last = request.messages[-1].text.strip() if request.messages else ""
        said = last.splitlines()[-1].strip() if last else "..."
        text = f"{self._prefix} {said}"
        return ModelResult(text=text, usage=Usage(1, 1), model="parrot", stop_reason="end_turn")


def create_llm(llm: LLMSettings, secrets: Secrets) -> BaseLLM:
    """The parrot model of ``[llm]``."""
    try:
        return ParrotLLM(ParrotOptions.model_validate(llm.options))
    except pydantic.ValidationError as exc:
        raise ConfigError(
            [f"llm.options.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        ) from None


def setup(app: App) -> None:
    """Register the ``parrot`` provider."""
    app.provider("parrot", create_llm)
