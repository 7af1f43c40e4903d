"""The signed callback data of Telegram buttons (adapters/telegram/buttons.py): it fits
Telegram's 64 bytes, carries what a press needs, never shows the token, and any change to it
(or data made up) is refused. Pure: no server."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adapters.telegram.buttons import DATA_LIMIT, ButtonSigner, Pressed
from bot.core.choices import BUTTON_LIFETIME, Choice

TOKEN = "123456789:AAHtest-Mira-buttons-0123456789abcdef"
SIGNER = ButtonSigner(TOKEN)
NOW = 1_800_000_000.0

users = st.integers(min_value=1, max_value=2**52)
chats = st.integers(min_value=-(10**13), max_value=2**52).filter(lambda c: c != 0)
commands = st.sampled_from(
    [
        "/forget confirm",
        "/forget cancel",
        "/persona orin",
        "/reminders cancel 123456",
        "/checkins off",
    ]
)


@given(chat=chats, asker=users, command=commands, closes=st.booleans())
def test_data_fits_and_verifies_to_what_was_signed(
    chat: int, asker: int, command: str, closes: bool
) -> None:
    data = SIGNER.data(chat, str(asker), Choice("label", command, closes), NOW)
    assert data is not None and len(data.encode()) <= DATA_LIMIT
    assert TOKEN not in data and TOKEN.split(":")[1] not in data
    assert SIGNER.verify(chat, data, NOW + 60) == Pressed(str(asker), command, closes)


@given(
    chat=chats,
    asker=users,
    command=commands,
    index=st.integers(min_value=0, max_value=63),
    char=st.characters(codec="utf-8"),
)
def test_any_change_is_refused(chat: int, asker: int, command: str, index: int, char: str) -> None:
    data = SIGNER.data(chat, str(asker), Choice("label", command), NOW)
    assert data is not None
    index %= len(data)
    changed = data[:index] + char + data[index + 1 :]
    if changed != data:
        assert SIGNER.verify(chat, changed, NOW) == "garbled"


@given(chat=chats, other=chats, asker=users)
def test_data_of_another_chat_or_another_bot_is_refused(chat: int, other: int, asker: int) -> None:
    data = SIGNER.data(chat, str(asker), Choice("Yes", "/forget confirm"), NOW)
    assert data is not None
    if other != chat:
        assert SIGNER.verify(other, data, NOW) == "garbled"
    another_bot = ButtonSigner("987654321:AAHanother-bot-token-0123456789abcd")
    assert another_bot.verify(chat, data, NOW) == "garbled"


@given(junk=st.text(max_size=64))
def test_made_up_data_is_refused(junk: str) -> None:
    assert SIGNER.verify(-100123, junk, NOW) == "garbled"


def test_old_data_expires_and_data_dated_ahead_is_still_ours() -> None:
    """A host of the bot whose clock runs ahead wrote it: verified by its MAC, it is valid."""
    data = SIGNER.data(5, "5", Choice("Yes", "/forget confirm"), NOW)
    assert data is not None
    assert isinstance(SIGNER.verify(5, data, NOW + BUTTON_LIFETIME - 1), Pressed)
    assert SIGNER.verify(5, data, NOW + BUTTON_LIFETIME + 1) == "expired"
    assert isinstance(SIGNER.verify(5, data, NOW - 3600), Pressed)


def test_what_cannot_be_a_button_is_none() -> None:
    long = Choice("Long", "/persona " + "x" * 60)
    assert SIGNER.data(5, "5", long, NOW) is None
    assert SIGNER.data(5, "anon:-100123", Choice("Yes", "/forget confirm"), NOW) is None
    assert SIGNER.keyboard(5, "5", [Choice("Yes", "/forget confirm"), long], NOW) is None


def test_too_many_choices_are_no_keyboard() -> None:
    many = [Choice(f"Cancel #{n}", f"/reminders cancel {n}", closes=False) for n in range(25)]
    assert SIGNER.keyboard(5, "5", many[:24], NOW) is not None
    assert SIGNER.keyboard(5, "5", many, NOW) is None
