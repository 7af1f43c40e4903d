"""Review 15b: each image of a group turn sits with its author, and an image whose message the
turn budget left out is not sent without it (memory/assemble.py)."""

from __future__ import annotations

import dataclasses

from bot.core.llm import ChatMessage, ImageBlock, TextBlock
from memory.assemble import Budget, assemble
from tests.memory.test_assemble import PIN, msg, turn_of
from tests.memory.test_content import PHOTO, image, media, with_media


def _layout(message: ChatMessage) -> list[str]:
    """Each block as 'img:N' (N: its byte) or the first header line of a text block."""
    out = []
    for block in message.blocks:
        if isinstance(block, ImageBlock):
            out.append(f"img:{block.data[0]}")
        else:
            assert isinstance(block, TextBlock)
            out.append(block.text.splitlines()[0])
    return out


def test_each_persons_photo_comes_right_before_their_own_header_in_a_group_turn() -> None:
    ann = with_media(
        msg(1, "my dog", author="1", name="Ann", private=False), media(1, PHOTO, "ready", message=1)
    )
    bob = with_media(
        msg(2, "", author="2", name="Bob", private=False),
        media(2, PHOTO, "ready", message=2),
        dataclasses.replace(media(3, PHOTO, "ready", message=2), position=1),
    )
    cat = with_media(
        msg(3, "mine", author="3", name="Cat", private=False), media(4, PHOTO, "ready", message=3)
    )
    out = assemble(
        PIN, turn_of(ann, bob, cat), Budget(), images={i: image(i) for i in (1, 2, 3, 4)}
    )
    (only,) = out.request.messages
    assert _layout(only) == [
        "img:1",
        '"Ann" (user "1"):',
        "img:2",
        "img:3",
        '"Bob" (user "2"):',
        "img:4",
        '"Cat" (user "3"):',
    ]


def test_a_window_run_of_several_people_keeps_each_image_with_its_author() -> None:
    ann = with_media(
        msg(1, "look", author="1", name="Ann", private=False), media(1, PHOTO, "ready", message=1)
    )
    bob = with_media(
        msg(2, "and mine", author="2", name="Bob", private=False),
        media(2, PHOTO, "ready", message=2),
    )
    out = assemble(
        PIN,
        turn_of(msg(4, "nice", author="1", name="Ann", private=False)),
        Budget(),
        history=[ann, bob, msg(3, "wow", "assistant")],
        images={1: image(1), 2: image(2)},
    )
    window, reply, _turn = out.request.messages
    assert _layout(window) == ["img:1", '"Ann" (user "1"):', "img:2", '"Bob" (user "2"):']
    # the conversation prefix's breakpoint still lands on the last window message
    assert reply.blocks[-1].cache is True


def test_an_image_whose_message_the_turn_budget_left_out_is_not_sent() -> None:
    first = with_media(
        msg(1, "x" * 3000, author="1", name="Ann", private=False),
        media(1, PHOTO, "ready", message=1),
    )
    rest = [msg(n, "y" * 3000, author="2", name="Bob", private=False) for n in range(2, 10)]
    out = assemble(
        PIN,
        turn_of(first, *rest),
        Budget(turn_tokens=200, prompt_tokens=3000),
        images={1: image(1)},
    )
    last = out.request.messages[-1]
    assert "earlier message(s) of this turn not shown" in last.text
    assert '"Ann"' not in last.text
    assert not any(isinstance(b, ImageBlock) for b in last.blocks)
    assert "images" not in dict(out.breakdown)
