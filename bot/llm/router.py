"""Several providers behind one model (docs/providers.md#several-providers): each request goes
to the provider it names (``ModelRequest.provider``: a persona's, the memory tasks'), and to
its fallback when that provider is unavailable.

The fallback rules: only for :class:`ModelUnavailable` (overloaded, 5xx, a timeout, a rate
limit), never for a rejection (a request the provider refused would be refused elsewhere too,
or should not be sent there: the pipeline closes it out or leaves it for the operator). A
stream falls back only if the primary failed before it showed any text: a person never sees
one model's half answer continued by another (the turn is then retried as any failed
attempt). The answer's ``ModelResult.model`` is the model that wrote it, so the reply, its
usage and its price are the fallback's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from bot.core.errors import ConfigError, ModelUnavailable
from bot.core.llm import DEFAULT_PROVIDER, BaseLLM, ModelRequest, ModelResult, TextSink

log = logging.getLogger("personabot.llm")


class ProviderRouter(BaseLLM):
    """Sends each request to its named provider, falling back when it is unavailable."""

    name = "router"

    def __init__(self, providers: Mapping[str, BaseLLM]) -> None:
        if DEFAULT_PROVIDER not in providers:
            raise ConfigError([f"llm: no {DEFAULT_PROVIDER!r} provider"])
        self._providers = dict(providers)

    def provider(self, name: str) -> BaseLLM:
        """The provider named ``name`` (a request naming an unknown one is a bug: the
        settings refuse such names)."""
        found = self._providers.get(name)
        if found is None:
            raise ConfigError([f"llm: no provider {name!r} (known: {', '.join(self._providers)})"])
        return found

    async def complete(self, request: ModelRequest) -> ModelResult:
        try:
            return await self.provider(request.provider).complete(request)
        except ModelUnavailable as exc:
            second = self._fallback(request, exc)
            if second is None:
                raise
        return await self.provider(second.provider).complete(second)

    async def stream(self, request: ModelRequest, on_text: TextSink) -> ModelResult:
        shown = False

        def sink(text: str) -> None:
            nonlocal shown
            shown = shown or bool(text)
            on_text(text)

        try:
            return await self.provider(request.provider).stream(request, sink)
        except ModelUnavailable as exc:
            second = None if shown else self._fallback(request, exc)
            if second is None:
                raise
        return await self.provider(second.provider).stream(second, on_text)

    def _fallback(self, request: ModelRequest, exc: ModelUnavailable) -> ModelRequest | None:
        route = request.fallback
        if route is None:
            return None
        log.warning(
            "%s on %s unavailable (%s); %s on %s answers instead",
            request.model,
            request.provider,
            type(exc).__name__,
            route.model,
            route.provider,
        )
        return replace(request, model=route.model, provider=route.provider, fallback=None)

    async def aclose(self) -> None:
        for llm in self._providers.values():
            await llm.aclose()
