"""Composition root: the only code that reads Settings and wires the runtime together.

A module per builder, read top-down from ``runtime.runtime`` (docs/architecture.md#plugins):

- ``registries``: platforms, model providers, transcribers (what plugins add to by name);
- ``policies``: settings read into rules (pure), and the hosted bots' profiles (``Hosted``);
- ``stores``: the store backend; ``services``: limits and accounting, media, memory, retention;
- ``turns``: the pipeline, check-ins and reminders, the queue; ``routing``: router, commands,
  exports; ``readiness``: the health server; ``background``: the tasks, owned in one place;
  ``mcp``: the MCP servers' specs, their secrets read from the environment.

Every name is importable from ``bot.app.build`` as before the split.
"""

from bot.app.build.background import Background
from bot.app.build.mcp import mcp_specs
from bot.app.build.memory import memory_jobs, memory_on
from bot.app.build.policies import (
    Hosted,
    access_policies,
    greeting_of,
    initiative_policy,
    macro_view,
    memory_policy,
    persona_choices,
    pin_for,
    profile_for,
    scene_rules,
    session_policy,
)
from bot.app.build.readiness import Backlog, readiness
from bot.app.build.registries import (
    PlatformFactory,
    ProviderFactory,
    TranscriberFactory,
    anthropic_provider,
    build_llm,
    build_transcriber,
    builtin_platform,
    builtin_platforms,
    builtin_providers,
    builtin_transcribers,
    offline_provider,
    openai_transcriber,
    unknown,
)
from bot.app.build.runtime import Runtime, Seams, runtime
from bot.app.build.services import (
    build_media,
    build_memory,
    build_retention,
    media_source,
    open_memory,
)
from bot.app.build.stores import build_store
from bot.app.build.turns import Agenda, build_agenda, turn_parts

__all__ = [
    "Agenda",
    "Background",
    "Backlog",
    "Hosted",
    "PlatformFactory",
    "ProviderFactory",
    "Runtime",
    "Seams",
    "TranscriberFactory",
    "access_policies",
    "anthropic_provider",
    "build_agenda",
    "build_llm",
    "build_media",
    "build_memory",
    "build_retention",
    "build_store",
    "build_transcriber",
    "builtin_platform",
    "builtin_platforms",
    "builtin_providers",
    "builtin_transcribers",
    "greeting_of",
    "initiative_policy",
    "macro_view",
    "mcp_specs",
    "media_source",
    "memory_jobs",
    "memory_on",
    "memory_policy",
    "offline_provider",
    "open_memory",
    "openai_transcriber",
    "persona_choices",
    "pin_for",
    "profile_for",
    "readiness",
    "runtime",
    "scene_rules",
    "session_policy",
    "turn_parts",
    "unknown",
]
