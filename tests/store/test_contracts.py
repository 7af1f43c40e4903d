"""The store contracts stay small enough to read (issue 36): no contract, and no consumer's
combination of contracts, holds more than 25 methods; both backends implement all of them;
and the methods that only the console reads are in the console's contract, not the runtime's."""

from __future__ import annotations

import inspect

import pytest

from bot.app.preview import PreviewStore
from bot.app.web.views import ConsoleReads
from bot.runtime.delivery import DeliveryStore
from bot.runtime.initiatives import ProactiveStore
from bot.runtime.limits import LimitsStore
from bot.runtime.pipeline import ReplyStore
from bot.runtime.router import RouterStore
from bot.runtime.trouble import TroubleStore
from bot.store import contracts
from bot.store.base import BaseStore
from bot.store.console import ConsoleStore
from bot.store.postgres import PostgresStore
from bot.store.sqlite import SQLiteStore
from memory.compaction import CompactionStore
from memory.erasure import ErasureStore
from memory.extraction import ExtractionStore
from memory.prompting import PromptStore
from memory.retention.worker import RetentionWorkerStore
from memory.service import ServiceStore

#: What a consumer may see at most (aiogram's BaseStorage has 5 methods, Litestar's Store 6).
MOST = 25

RUNTIME = [
    c
    for _, c in inspect.getmembers(contracts, inspect.isclass)
    if c.__module__ == contracts.__name__ and getattr(c, "_is_protocol", False)
]
COMBINED = [
    LimitsStore,
    RouterStore,
    RetentionWorkerStore,
    ConsoleReads,
    PromptStore,
    CompactionStore,
    ExtractionStore,
    ErasureStore,
    ServiceStore,
    ReplyStore,
    TroubleStore,
    ProactiveStore,
    DeliveryStore,
    PreviewStore,
]


def _methods(contract: type) -> set[str]:
    return {name for name in dir(contract) if name in getattr(contract, "__abstractmethods__", ())}


@pytest.mark.parametrize(
    "contract", [*RUNTIME, ConsoleStore, *COMBINED], ids=lambda c: str(c.__name__)
)
def test_no_consumer_sees_more_than_a_readable_contract(contract: type) -> None:
    assert 0 < len(_methods(contract)) <= MOST


def test_the_union_is_every_contract_and_the_backends_implement_it() -> None:
    union = set().union(*(_methods(c) for c in [*RUNTIME, ConsoleStore]))
    assert _methods(BaseStore) == union
    assert not SQLiteStore.__abstractmethods__ and not PostgresStore.__abstractmethods__


def test_the_console_reads_are_not_in_the_runtime_contracts() -> None:
    runtime = set().union(*(_methods(c) for c in RUNTIME))
    assert not runtime & _methods(ConsoleStore)
    assert {"pending_count", "get_session", "list_sessions", "tombstones"} <= _methods(ConsoleStore)
