"""How a message with a quote, media and voice reads to the model, and where images go in a
request (memory/content.py, memory/assemble.py)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from bot.core.events import StoredMessage
from bot.core.llm import ImageBlock, TextBlock
from bot.core.media import MediaRef, MediaStatus, Quote, StoredMedia
from bot.llm.offline import OfflineLLM
from memory.assemble import Budget, ShownImage, assemble
from memory.content import media_line, own_words, quote_line, spoken
from memory.tasks import extraction_request, parse_summary_update, summary_request
from tests.memory.test_assemble import PIN, msg, turn_of

PHOTO = MediaRef("image", "photo", ref="f1")
VOICE = MediaRef("voice", "voice message", ref="v1", duration=7.0)


def media(
    id_: int, ref: MediaRef, status: MediaStatus = "new", note: str = "", message: int = 1
) -> StoredMedia:
    return StoredMedia(
        id=id_,
        message_id=message,
        position=0,
        ref=ref,
        status=status,
        media_type="image/jpeg" if status == "ready" and ref.kind == "image" else "",
        note=note,
    )


def with_media(message: StoredMessage, *items: StoredMedia) -> StoredMessage:
    return dataclasses.replace(message, media=items)


def test_a_reply_names_who_wrote_the_quoted_message_and_what() -> None:
    message = dataclasses.replace(
        msg(3, "yes, that one"), quote=Quote("reply", "Ann", "shall we meet at 5?", "12")
    )
    assert spoken(message) == (
        '[replying to "Ann" (user "12"), who wrote: "shall we meet at 5?"]\nyes, that one'
    )


def test_a_reply_to_the_bot_and_a_forward_read_as_such() -> None:
    mine = Quote("reply", "Mira", "I love rain.", from_bot=True)
    assert quote_line(mine) == '[replying to your own message: "I love rain."]'
    forward = Quote("forward", "News Channel", "Storm warning")
    assert quote_line(forward) == '[forwarded from "News Channel": "Storm warning"]'
    assert quote_line(Quote("forward", "", "hi")) == '[forwarded: "hi"]'
    assert quote_line(Quote("quote", "Ann", "at 5")).startswith('[quoting "Ann"')


@given(st.text(), st.text())
def test_no_quoted_text_or_author_can_start_a_line_of_its_own(author: str, text: str) -> None:
    line = quote_line(Quote("reply", author, text, "7"))
    assert len(line.splitlines()) == 1
    assert "<" not in line and ">" not in line


def test_forwarded_and_quoted_words_are_never_the_persons_own() -> None:
    forwarded = dataclasses.replace(
        msg(1, ""), quote=Quote("forward", "Bob", "I am a doctor in Oslo")
    )
    spoke = with_media(msg(2, "and also"), media(5, VOICE, "ready", "I live in Lyon"))
    assert own_words(forwarded) == ""
    assert own_words(spoke) == "I live in Lyon\nand also"
    request = extraction_request("Sasha", [forwarded, spoke], "m")
    body = request.messages[0].text
    assert "Oslo" not in body and "Lyon" in body


def test_voice_notes_read_as_what_happened_to_them() -> None:
    assert media_line(media(1, VOICE, "ready", "see you at noon")) == (
        "[voice message, transcribed] see you at noon"
    )
    assert "cannot listen" in media_line(media(1, VOICE, "skipped", "no transcriber"))
    assert "(0:07)" in media_line(media(1, VOICE, "skipped"))
    assert "could not be transcribed" in media_line(media(1, VOICE, "failed", "gone"))
    assert "nothing could be heard" in media_line(media(1, VOICE, "ready", ""))


def test_an_image_the_model_does_not_get_says_so() -> None:
    assert media_line(media(1, PHOTO, "ready"), shown=True) == "[photo]"
    assert "not shown" in media_line(media(1, PHOTO, "ready"))
    assert "could not be loaded" in media_line(media(1, PHOTO, "failed", "too big"))
    assert "could not be loaded" in media_line(media(1, PHOTO, "new", "timed out"))


def image(n: int) -> ShownImage:
    return ShownImage(ImageBlock("image/jpeg", bytes([n]) * 10), tokens=100)


def test_images_go_before_their_message_text_in_the_window_and_the_turn() -> None:
    old = with_media(msg(1, "my cat"), media(1, PHOTO, "ready", message=1))
    turn = with_media(msg(3, "and now"), media(2, PHOTO, "ready", message=3))
    out = assemble(
        PIN,
        turn_of(turn),
        Budget(),
        history=[old, msg(2, "cute!", "assistant")],
        images={1: image(1), 2: image(2)},
    )
    first, reply, last = out.request.messages
    assert isinstance(first.blocks[0], ImageBlock) and first.blocks[0].data == bytes([1]) * 10
    assert first.text == "[photo]\nmy cat"
    # the conversation-prefix breakpoint stays on the last window message
    assert reply.blocks[-1].cache is True
    assert isinstance(last.blocks[0], ImageBlock) and last.blocks[0].data == bytes([2]) * 10
    assert isinstance(last.blocks[-1], TextBlock) and last.text == "[photo]\nand now"
    assert dict(out.breakdown)["images"] == 200
    assert "images(2)" in out.request.layers


def test_an_image_whose_message_left_the_window_is_not_sent() -> None:
    old = with_media(msg(1, "x" * 6000), media(1, PHOTO, "ready", message=1))
    out = assemble(
        PIN,
        turn_of(msg(3, "hi")),
        Budget(prompt_tokens=1200),
        history=[old, msg(2, "ok", "assistant")],
        images={1: image(1)},
    )
    assert not any(isinstance(b, ImageBlock) for m in out.request.messages for b in m.blocks)
    assert "images" not in dict(out.breakdown)


def test_a_trailing_user_run_folded_into_the_turn_keeps_its_images() -> None:
    context = with_media(msg(1, "look", private=False), media(1, PHOTO, "ready", message=1))
    out = assemble(
        PIN,
        turn_of(msg(2, "what is it?", private=False)),
        Budget(),
        history=[context],
        images={1: image(1)},
    )
    (only,) = out.request.messages
    assert isinstance(only.blocks[0], ImageBlock)
    assert "look" in only.text and "what is it?" in only.text


def test_the_summariser_sees_the_images_it_folds_and_is_asked_to_describe_them() -> None:
    chunk = [with_media(msg(4, "my new bike"), media(9, PHOTO, "ready", message=4))]
    request = summary_request(None, chunk, "m", {9: image(9).block})
    blocks = request.messages[0].blocks
    assert any(isinstance(b, ImageBlock) for b in blocks)
    assert any(isinstance(b, TextBlock) and "Image of turn 4" in b.text for b in blocks)
    assert "describe" in request.system[0].text or "showed" in request.system[0].text
    transcript = request.messages[0].blocks[0]
    assert isinstance(transcript, TextBlock)
    assert "[photo]" in transcript.text and "not shown" not in transcript.text


async def test_the_offline_summariser_still_reads_a_chunk_that_carries_images() -> None:
    chunk = [with_media(msg(4, "my new bike is red"), media(9, PHOTO, "ready", message=4))]
    result = await OfflineLLM().complete(summary_request(None, chunk, "m", {9: image(9).block}))
    assert "my new bike is red" in str(parse_summary_update(result.text))
