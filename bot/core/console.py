"""What the operator console reads from the store (docs/web.md): rows of its lists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from bot.core.events import ConversationKey, StoredMessage, UserKey

#: The session value a turn writes when it finds turns of its session missing: the gap
#: policy and the ranges, at the time they were first found (the overview lists them). A
#: partial index of migration 14 holds exactly these rows, so its name is fixed there too.
GAP_NOTICED_KEY: Final = "personabot:gap_noticed"


@dataclass(frozen=True, slots=True)
class ConversationRow:
    """A conversation in the console's list: its newest session and who spoke in it."""

    id: int  # the conversation's row id: the console's handle for it
    key: ConversationKey
    session_no: int
    status: str  # of that session: open, closed or expired
    last_activity_at: float
    persona: str | None
    participants: tuple[str, ...]  # display names of that session's people (a few)
    session_row: int = 0  # the session's row id: the keyset's tie-breaker

    @property
    def cursor(self) -> str:
        """Where the next page starts (keyset: activity, then session row)."""
        return f"{self.last_activity_at!r}:{self.session_row}"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One operator action or view of a person's memory (who, when, what)."""

    id: int
    at: float
    actor: str
    action: str
    target: str
    detail: str


@dataclass(frozen=True, slots=True)
class QueueView:
    """The queue across processes, from one read."""

    timers: int  # conversations with input waiting (armed timers)
    due: int  # of them, due now
    leases: tuple[tuple[str, int], ...]  # turn leases held now, by holder
    oldest_due_at: float | None


@dataclass(frozen=True, slots=True)
class UsageBucket:
    """Model calls in one time bucket (the overview's chart)."""

    start: float
    calls: int  # charges: a call shared by several people counts once per person
    replies: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int


@dataclass(frozen=True, slots=True)
class ConsoleEvent:
    """A session found with turns missing, or a turn the model rejected (the overview's
    list of recent trouble)."""

    at: float  # when the gap was first found; when the rejected messages were written
    kind: Literal["gap", "rejected"]
    conversation_id: int
    key: ConversationKey
    session_no: int
    detail: str  # the missing turns and the gap policy, or why the model rejected the turn
    turns: tuple[int, ...] = ()  # of the rejected messages


#: What a per-person daily limit counts (the console's "nearest their limits").
TopMeasure = Literal["input_tokens", "cost", "turns"]


@dataclass(frozen=True, slots=True)
class PersonUsage:
    """What one person used since a time (a per-person limit's count)."""

    user: UserKey
    used: int | float  # turns or tokens; dollars for the money limit


@dataclass(frozen=True, slots=True)
class PersonChat:
    """A conversation a person wrote in (their page lists the newest few)."""

    id: int  # the conversation's row id (its console page)
    key: ConversationKey
    last_at: float  # their newest message there
    messages: int  # of theirs there


@dataclass(frozen=True, slots=True)
class PersonView:
    """What a person's console page reads of their messages: how many, the names they went
    by (the newest few), the conversations they wrote in (the newest few) and the messages
    their remembered facts came from. Bounded whatever they wrote: the page once read every
    message of theirs."""

    messages: int
    names: tuple[str, ...]
    sources: dict[int, StoredMessage]
    chats: tuple[PersonChat, ...] = ()
    more_chats: bool = False  # they wrote in more conversations than ``chats`` lists
    # Anything is stored of them: a message, a memory record (a /forget leaves one), a turn
    # or a charge counted against their limits. A typo'd user id is none of these (a 404).
    known: bool = False
