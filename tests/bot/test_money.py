"""Issue 38 item 3: prices, money limits and costs (what each call cost is recorded when it is
charged, so limits, /stats and the console speak money)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bot.app.web import console_data
from bot.config import Settings, load_settings
from bot.core.clock import ManualClock
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, UserKey
from bot.core.llm import ModelRequest, ModelResult, Price, Usage
from bot.runtime.limits import LimitPolicy
from bot.runtime.stats import usage_report
from bot.store.base import BaseStore
from tests.fakes.llm import GatedLLM
from tests.harness import PERSONA, harness

DM = ConversationKey("telegram", "100")
OTHER = ConversationKey("telegram", "200")
#: GatedLLM's calls use 10 input and 5 output tokens; the harness prices model "gated" at
#: $3 in and $15 out per million: 105 micro-dollars a call.
CALL = (10 * 3 + 5 * 15) / 1_000_000


async def test_the_cost_of_each_call_is_recorded_with_its_cache_prices(store: BaseStore) -> None:
    price = Price(input=1.0, output=2.0, cache_write=3.0, cache_read=4.0)
    usage = Usage(100, 10, 1000, 2000)
    await store.record_usage(DM, "reply", "m", [("7", usage)], 50.0, price=price)
    await store.record_usage(DM, "reply", "unpriced", [("7", usage)], 60.0)
    expected = (100 * 1 + 10 * 2 + 1000 * 3 + 2000 * 4) / 1_000_000
    assert await store.cost_since(UserKey("telegram", "7"), 0.0) == pytest.approx(expected)
    assert await store.cost_since(UserKey("telegram", "7"), 55.0) == 0.0  # unpriced: unknown
    stats = await store.usage_since(0.0, "default")
    assert stats.cost == pytest.approx(expected) and stats.input_tokens == 200
    # Without cache prices, Anthropic's rules: writes 1.25x and reads 0.1x of input.
    assert Price(1.0, 2.0).cost(usage) == pytest.approx((100 + 20 + 1250 + 200) / 1_000_000)


async def test_a_person_over_their_dollars_per_day_is_held_back_and_others_are_answered(
    store: BaseStore, clock: ManualClock
) -> None:
    limits = LimitPolicy(user_dollars_per_day=2.5 * CALL, message="Budget spent until {until}.")
    llm = GatedLLM()
    async with harness(store, clock, llm, limits=limits) as h:
        for i in range(3):
            await h.say(DM, f"message {i}", author="99")
            await h.advance(2)
        assert llm.calls == 3  # the third was admitted at 2 calls' cost, under 2.5
        assert await store.cost_since(UserKey("telegram", "99"), 0.0) == pytest.approx(3 * CALL)
        await h.say(DM, "still there?", author="99")
        await h.advance(2)
        assert llm.calls == 3
        assert h.outlet.texts()[-1].startswith("Budget spent until")
        await h.say(OTHER, "hello", author="7")
        await h.advance(2)
        assert llm.calls == 4 and h.outlet.texts()[-1] == "reply to: hello"
        data = console_data(
            settings=Settings.model_validate({"limits": {"user_dollars_per_day": 2.5 * CALL}}),
            store=h.store,
            memory=h.memory,
            clock=clock,
            page_size=20,
        )
        overview = await data.overview()
    (money,) = overview["person_limits"]
    assert money["limit"] == "user_dollars_per_day"
    assert [(p["user_id"], p["used"]) for p in money["people"]] == [
        ("99", round(3 * CALL, 4)),
        ("7", round(CALL, 4)),
    ]
    assert overview["bots"] == [] or all("cost_today" in b for b in overview["bots"])


async def test_a_bot_over_its_dollars_per_day_answers_nobody_until_the_next_day(
    store: BaseStore, clock: ManualClock
) -> None:
    limits = LimitPolicy(bot_dollars_per_day=1.5 * CALL, message="Spent until {until}.")
    llm = GatedLLM()
    async with harness(store, clock, llm, limits=limits) as h:
        for chat, author in ((DM, "1"), (OTHER, "2")):
            await h.say(chat, "hi", author=author)
            await h.advance(2)
        assert llm.calls == 2  # the second was admitted at one call's cost
        await h.say(DM, "and now?", author="1")
        await h.advance(2)
        assert llm.calls == 2 and h.outlet.texts()[-1].startswith("Spent until")
        # What /stats sends: the cost the calls were charged.
        report = await usage_report(store, clock, {"gated": Price(3.0, 15.0)}, "default")
    assert f"estimated cost: ${2 * CALL:.4f}" in report


def test_a_money_limit_needs_a_price_for_every_model_it_would_count(tmp_path: Path) -> None:
    path = tmp_path / "personabot.toml"
    path.write_text(
        """
[limits]
user_dollars_per_day = 1.0

[[personas]]
id = "mira"
name = "Mira"
system = "You are Mira."
first_message = ["Hi"]
model = "llama3.1:8b"
""",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"model 'llama3.1:8b' has no price"):
        load_settings(path)
    path.write_text(
        path.read_text(encoding="utf-8") + '\n[llm.prices."llama3.1:8b"]\ninput = 0\noutput = 0\n',
        encoding="utf-8",
    )
    settings = load_settings(path)
    # Pricing a local model keeps the documented Claude prices.
    assert {"llama3.1:8b", "claude-sonnet-5-5"} <= settings.llm.prices.keys()


async def test_a_call_answered_under_a_dated_model_name_is_priced_as_the_model_asked(
    store: BaseStore, clock: ManualClock
) -> None:
    """Review 38: an endpoint names the model it served ("gpt-4.1-mini-2025-04-14" for
    "gpt-4.1-mini", an alias's target): the call is priced as the requested model, so a
    money limit still counts it."""
    llm = GatedLLM(answer=lambda r: f"reply to: {r.messages[-1].text}")
    served = "gated-2026-12-01"
    original = llm.complete

    async def dated(request: ModelRequest) -> ModelResult:
        return replace(await original(request), model=served)

    llm.complete = dated  # type: ignore[method-assign]
    limits = LimitPolicy(bot_dollars_per_day=1.5 * CALL, message="Spent until {until}.")
    asked = PERSONA.model_copy(update={"model": "gated"})  # priced; the served name is not
    async with harness(store, clock, llm, limits=limits, persona=asked) as h:
        for text in ("one", "two", "three"):
            await h.say(DM, text, author="1")
            await h.advance(2)
        assert await store.cost_since(UserKey("telegram", "1"), 0.0) == pytest.approx(2 * CALL)
        assert h.outlet.texts()[-1].startswith("Spent until")
