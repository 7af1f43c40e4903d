"""Prometheus metrics of one process, labelled by platform and persona (never by user).

Each runtime owns its own CollectorRegistry (no process-global state), so tests and several
runtimes in one process never share counters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from bot.core.events import ConversationKey
from bot.core.llm import Price, Usage

LABELS: Final = ("platform", "persona")
_LATENCY_BUCKETS: Final = (0.5, 1, 2, 4, 8, 15, 30, 60, 120)
_LAG_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    """The counters and histograms personabot exports."""

    def __init__(
        self,
        *,
        personas: Mapping[str, str] | None = None,
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self._personas = dict(personas or {})
        self._prices = dict(prices or {})
        r = self.registry

        def counter(name: str, doc: str, *extra: str) -> Counter:
            return Counter(name, doc, (*LABELS, *extra), registry=r)

        self.inbound = counter("personabot_inbound_messages", "Inbound messages stored")
        self.duplicates = counter("personabot_duplicates_dropped", "Repeated deliveries ignored")
        self.rejected = Counter(
            "personabot_inbound_rejected",
            "Platform updates that could not be read (logged once, acknowledged, skipped)",
            ("platform", "bot", "kind"),
            registry=r,
        )
        self.media = Counter(
            "personabot_media",
            "Media prepared for a turn by kind and outcome: ready, failed, skipped, retry",
            ("kind", "outcome"),
            registry=r,
        )
        self.denied = counter("personabot_access_denied", "Messages from people not allowed")
        self.turns = counter("personabot_turns", "Turns by outcome", "outcome")
        self.model_calls = counter("personabot_model_calls", "Model calls", "purpose")
        self.tool_calls = counter(
            "personabot_tool_calls",
            "Tool calls of the model by outcome: ok, error, timeout, bad_arguments, unknown_tool, "
            "not_run (a bound), deferred (a side effect), effect_ok/_error/_timeout (after the "
            "reply)",
            "tool",
            "outcome",
        )
        # bot/mcp: MCP servers as tools (docs/tools.md#mcp-servers).
        self.mcp_server_up = Gauge(
            "personabot_mcp_server_up",
            "1 while the MCP server is connected, 0 while it starts or restarts",
            ("server",),
            registry=r,
        )
        self.mcp_calls = Counter(
            "personabot_mcp_calls",
            "Calls of MCP tools by outcome: ok, error (the server said so), timeout, failed "
            "(the connection broke, an unreadable answer), unavailable (the server was down)",
            ("server", "tool", "outcome"),
            registry=r,
        )
        self.discarded = counter(
            "personabot_replies_discarded", "Replies thrown away by the final check"
        )
        self.generations_cut = counter(
            "personabot_generations_cut",
            "Reply generations cancelled because newer input made them stale (queue rule 9)",
        )
        self.cut_tokens = counter(
            "personabot_generations_cut_tokens",
            "Tokens charged for reply generations cut by newer input (estimated when cut)",
            "kind",
        )
        self.cut_cost = counter(
            "personabot_generations_cut_cost_dollars",
            "Estimated cost of reply generations cut by newer input",
        )
        self.scene_lines = counter(
            "personabot_scene_lines",
            "Lines of scenes' personas recorded (docs/scenes.md), by persona",
            "persona",
        )
        self.scene_caps = counter(
            "personabot_scene_caps",
            "Scene caps hit: autonomous cap, hourly cap (docs/scenes.md#loops)",
            "cap",
        )
        self.lease_conflicts = counter(
            "personabot_lease_conflicts", "Turns skipped because another worker held the lease"
        )
        self.tokens = counter("personabot_tokens", "Model tokens", "kind")
        self.cost = counter("personabot_cost_dollars", "Estimated model cost in dollars")
        self.speech = counter(
            "personabot_speech",
            "Replies to be spoken by outcome: spoken, failed, timeout, too_long (docs/voices.md)",
            "outcome",
        )
        self.gap_notices = counter(
            "personabot_gap_notices", "Sessions with missing turns", "policy"
        )
        self.limit_hits = counter("personabot_limit_hits", "Turns stopped by a limit", "limit")
        self.initiatives = counter(
            "personabot_initiatives",
            "Check-ins and reminders the persona wrote first, by outcome (sent, skipped, ...)",
            "outcome",
        )
        self.closed_out = counter(
            "personabot_messages_closed_out",
            "User messages closed without a reply of their own (never submitted again)",
            "reason",
        )
        self.refusals = counter(
            "personabot_refusals", "Replies without text (a refusal): the refusal line was sent"
        )
        self.retention_deleted = Counter(
            "personabot_retention_deleted_messages",
            "Messages deleted by retention",
            registry=r,
        )
        self.turn_latency = Histogram(
            "personabot_turn_latency_seconds",
            "From the lease to the recorded reply",
            LABELS,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        # Read from the store at each /readyz and /metrics request (docs/scaling.md#overload).
        self.backlog_turns = Gauge(
            "personabot_queue_backlog_turns",
            "Due turns of this process's bots that no process has started yet",
            registry=r,
        )
        self.backlog_age = Gauge(
            "personabot_queue_backlog_age_seconds",
            "How long the oldest of those turns has been due (0: none waits)",
            registry=r,
        )
        # bot/runtime/loopwatch.py: one event loop carries every bot, the queue and the
        # console of a process; anything holding it delays them all by as much.
        self.event_loop_stall = Histogram(
            "personabot_event_loop_stall_seconds",
            "How much later than asked the event loop woke a timer: how long it was held",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.scheduler_lag = Histogram(
            "personabot_scheduler_lag_seconds",
            "From a timer's due time to the start of its turn",
            LABELS,
            buckets=_LAG_BUCKETS,
            registry=r,
        )

    def labels(self, conversation: ConversationKey) -> tuple[str, str]:
        """(platform, persona) of a conversation."""
        return conversation.platform, self._personas.get(conversation.bot, conversation.bot)

    def usage(self, conversation: ConversationKey, model: str, usage: Usage) -> None:
        """Count tokens and estimated cost of one model call."""
        labels = self.labels(conversation)
        for kind, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_write", usage.cache_creation_input_tokens),
            ("cache_read", usage.cache_read_input_tokens),
        ):
            self.tokens.labels(*labels, kind).inc(value)
        price = self._prices.get(model)
        if price is not None:
            self.cost.labels(*labels).inc(price.cost(usage))

    def cut_usage(self, conversation: ConversationKey, model: str, usage: Usage) -> None:
        """What a cut generation was charged (also in ``usage``'s totals): the console's
        "generations cut" line (docs/architecture.md#queue rule 9)."""
        labels = self.labels(conversation)
        self.cut_tokens.labels(*labels, "input").inc(usage.input_tokens)
        self.cut_tokens.labels(*labels, "output").inc(usage.output_tokens)
        price = self._prices.get(model)
        if price is not None:
            self.cut_cost.labels(*labels).inc(price.cost(usage))

    def price(self, model: str) -> Price | None:
        """The configured price of a model."""
        return self._prices.get(model)

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)
