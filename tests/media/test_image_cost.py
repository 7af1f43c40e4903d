"""Review 15b: a call is shared between the people of a turn by what their messages cost the
prompt, a photo included (bot/core/shares.py), so one person's photos are not charged to (and
do not use up the daily input tokens of) someone who only wrote a line."""

from __future__ import annotations

import io

from PIL import Image

from bot.core.clock import ManualClock
from bot.core.events import ConversationKey, Inbound, UserKey
from bot.core.media import MediaRef
from bot.llm.offline import OfflineLLM
from bot.store.base import BaseStore
from tests.fakes.media_source import FakeFiles, MediaOutlet
from tests.harness import BOT, harness, settle

GROUP = ConversationKey("telegram", "-100", None, BOT)


def jpeg(color: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (1200, 900), color).save(out, "JPEG")
    return out.getvalue()


async def test_the_person_who_sent_the_photos_pays_for_them_not_the_one_who_wrote(
    store: BaseStore, clock: ManualClock
) -> None:
    files = FakeFiles(clock)
    colors = ("red", "green", "blue", "white")
    for n, color in enumerate(colors):
        files.files[f"f{n}"] = jpeg(color)
    async with harness(store, clock, OfflineLLM(), outlet=MediaOutlet(clock, files)) as h:
        photos = tuple(
            MediaRef("image", "photo", ref=f"f{n}", unique_id=f"u{n}", media_type="image/jpeg")
            for n in range(len(colors))
        )
        await h.router(Inbound(GROUP, "1", "Ann", "", "p1", is_private=False, media=photos))
        await h.router(
            Inbound(
                GROUP,
                "2",
                "Bob",
                "@Mira what do you make of what Ann just posted, honestly?",
                "p2",
                is_private=False,
            )
        )
        await settle(h.store)
        await h.advance(3)
    assert len(h.outlet.texts(GROUP)) == 1
    ann = await store.input_tokens_since(UserKey("telegram", "1"), 0.0)
    bob = await store.input_tokens_since(UserKey("telegram", "2"), 0.0)
    # four photos of about 1,400 tokens each against one line of text
    assert ann > 4 * bob, (ann, bob)
