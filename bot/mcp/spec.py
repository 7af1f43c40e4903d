"""What the composition root hands the MCP client: plain, frozen descriptions of each server,
its secrets already read from the environment (never printed: ``repr=False``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

#: The first restart of a server that failed waits this long; each next one twice as long ...
BACKOFF_FIRST_SECONDS: Final = 1.0
#: ... up to this.
BACKOFF_CAP_SECONDS: Final = 60.0

Effects = Literal["read_only", "effectful"]


@dataclass(frozen=True, slots=True)
class Stdio:
    """A server started as a process, spoken to over its stdin and stdout."""

    command: str
    args: tuple[str, ...] = ()
    #: The server's environment beyond the SDK's safe defaults (PATH, HOME...): secrets.
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None


@dataclass(frozen=True, slots=True)
class Http:
    """A server reached over streamable HTTP."""

    url: str
    #: Sent with every request: secrets (an ``Authorization`` header).
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """One MCP server: how to reach it, which of its tools are offered, and to whom."""

    name: str
    transport: Stdio | Http
    #: The server's tools the model may call, each read-only or effectful.
    tools: Mapping[str, Effects]
    #: Bot keys and persona ids that may use it (empty: every one).
    bots: frozenset[str] = frozenset()
    personas: frozenset[str] = frozenset()
    call_timeout_seconds: float = 15.0
    start_timeout_seconds: float = 30.0
    max_result_chars: int = 16_000
    backoff_first_seconds: float = BACKOFF_FIRST_SECONDS
    backoff_cap_seconds: float = BACKOFF_CAP_SECONDS

    def offered_name(self, tool: str) -> str:
        """The name the model sees of one of its tools (within the provider's 64 characters:
        the settings check it)."""
        return f"{self.name}__{tool}"

    def serves(self, bot: str, persona: str) -> bool:
        """Whether this bot speaking as this persona may use the server's tools."""
        return (not self.bots or bot in self.bots) and (
            not self.personas or persona in self.personas
        )

    def backoff(self, failures: int) -> float:
        """The wait before the next start after ``failures`` failed starts in a row (>= 1)."""
        return min(self.backoff_cap_seconds, self.backoff_first_seconds * 2.0 ** (failures - 1))
