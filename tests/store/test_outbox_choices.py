"""A command answer's choices in the outbox (migration 23, docs/telegram.md#buttons): kept with
the row until it is sent, so recovery after a crash re-sends the buttons; cleared with the text
once sent; an outlet without buttons gets the typed commands. On both stores."""

from __future__ import annotations

from bot.core.choices import Choice, Choices
from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Reply
from bot.runtime.delivery import Delivery
from bot.store.base import BaseStore
from tests.fakes.outlet import RecordingOutlet
from tests.store.helpers import outbox_rows

C = ConversationKey("telegram", "1001", None, "mira")
T0 = 1_800_000_000.0
ASK = Choices(
    "1001", (Choice("Yes, erase", "/forget confirm"), Choice("No, keep it", "/forget cancel"))
)


class ButtonOutlet(RecordingOutlet):
    """A recording outlet that shows choices as buttons (as Telegram's adapter does)."""

    def shows_choices(self, conversation: ConversationKey) -> bool:
        return True


async def test_recovery_resends_an_answer_with_its_buttons_and_sending_clears_them(
    store: BaseStore,
) -> None:
    clock = ManualClock(T0)
    # Recorded, then the process died before sending it.
    await store.record_outbox(C, "Erase everything?", T0, reply_to="7", choices=ASK)
    assert await outbox_rows(store) == [("Erase everything?", ASK.dumps())]
    (row,) = await store.unsent_outbox(T0)
    assert row.choices == ASK
    outlet = ButtonOutlet(clock)
    delivery = Delivery(store=store, clock=clock, outlet_for=lambda bot: outlet)
    assert await delivery.recover(older_than=T0) == 1
    ((_, reply),) = outlet.replies
    assert (reply.text, reply.choices) == ("Erase everything?", ASK)
    # Sent: neither the text nor the choices stay in the store.
    assert await outbox_rows(store) == [("", None)]
    assert await store.unsent_outbox(T0 + 1) == []


async def test_an_outlet_without_buttons_gets_the_typed_commands(store: BaseStore) -> None:
    clock = ManualClock(T0)
    outlet = RecordingOutlet(clock)
    delivery = Delivery(store=store, clock=clock, outlet_for=lambda bot: outlet)
    assert await delivery.send(C, "Erase everything?", kind="answer", choices=ASK)
    ((_, reply),) = outlet.replies
    assert reply == Reply(
        C,
        "Erase everything?\n\n/forget confirm - Yes, erase\n/forget cancel - No, keep it",
        outbox_id=reply.outbox_id,
    )
