"""Merge and trim rules of user memory and the rolling summary."""

from __future__ import annotations

import pytest

from memory.records import (
    MemoryItem,
    RecordError,
    Summary,
    UserMemory,
    forget_sources,
    merge_memory,
    merge_summary,
    trim_memory,
)


def item(section: str, field: str, value: str, source: int, at: float = 0.0) -> MemoryItem:
    return MemoryItem(section, field, value, (source,), True, at)  # type: ignore[arg-type]


def test_new_job_replaces_old_job_and_duplicates_are_not_added() -> None:
    old = UserMemory(
        (item("semantic", "occupation", "nurse", 1), item("semantic", "interest", "chess", 2))
    )
    merged = merge_memory(
        old,
        [
            item("semantic", "occupation", "pilot", 7),
            item("semantic", "interest", "Chess ", 8),
            item("semantic", "interest", "sailing", 9),
        ],
    )
    values = [(i.field, i.value) for i in merged.items]
    assert values == [("interest", "chess"), ("occupation", "pilot"), ("interest", "sailing")]
    chess = next(i for i in merged.items if i.value == "chess")
    assert chess.sources == (2, 8)  # the duplicate only added its source


def test_trim_drops_oldest_events_first() -> None:
    events = [
        item("episodic", "event", f"event number {i} " * 5, i, at=float(i)) for i in range(30)
    ]
    record = UserMemory((item("semantic", "name", "Ada", 100), *events))
    trimmed = trim_memory(record, 120)
    assert trimmed.section("semantic")  # the name stays
    kept = [i.sources[0] for i in trimmed.section("episodic")]
    assert kept == sorted(kept) and kept[-1] == 29 and 0 not in kept


def test_forget_sources_removes_items_learned_only_from_deleted_messages() -> None:
    record = UserMemory(
        (item("semantic", "name", "Ada", 1), MemoryItem("semantic", "interest", "chess", (2, 3)))
    )
    after = forget_sources(record, [1, 2])
    assert [(i.value, i.sources) for i in after.items] == [("chess", (3,))]


def test_record_json_round_trip_and_bad_json() -> None:
    record = UserMemory((item("emotional", "fear", "flying", 4),), forgotten_at=12.5)
    assert UserMemory.from_json(record.to_json()) == record
    with pytest.raises(RecordError):
        UserMemory.from_json('{"items": [{"section": "gossip", "field": "x", "value": "y"}]}')


def test_summary_carries_earlier_values_forward_verbatim() -> None:
    first = merge_summary(
        None, {"user_said": ["We agreed on a 4-hour SLA"], "topics": ["SLA"]}, 1, 6, 800
    )
    second = merge_summary(
        first, {"user_said": ["The office is in Lyon"], "topics": ["offices"]}, 7, 12, 800
    )
    assert second.user_said == ("We agreed on a 4-hour SLA", "The office is in Lyon")
    assert (second.first_turn, second.last_turn) == (1, 12)
    third = merge_summary(
        second,
        {"remove": ["The office is in Lyon"], "user_said": ["The office moved to Nice"]},
        13,
        18,
        800,
    )
    assert third.user_said == ("We agreed on a 4-hour SLA", "The office moved to Nice")


def test_summary_trim_keeps_what_the_user_said_longest() -> None:
    big = Summary(
        1, 50, topics=tuple(f"topic {i}" for i in range(50)), user_said=("the SLA is 4 hours",)
    )
    small = merge_summary(big, {}, 1, 50, 60)
    assert small.user_said == ("the SLA is 4 hours",)
    assert len(small.topics) < 50
