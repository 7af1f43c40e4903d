"""A lorebook over its budget, end to end: two entries that each fit the budget alone but not
together. ``personabot chat`` (a real turn, against the fake Messages API with the real
anthropic SDK) sends only the entry that ranks first and logs the other's drop;
``personabot prompt`` reports it as a budget drop; alone, the dropped one fits and fires."""

from __future__ import annotations

import getpass
import re
from pathlib import Path

import pytest

from tests.bot.test_cli import _run
from tests.fakes.messages_api import FakeMessagesAPI
from tests.processes import clean_env

BUDGET = 100
# Each about 60 estimated tokens: under the budget of 100 alone, over it together.
DRAGON = (
    "Vermithrax, an old red dragon, sleeps under Mount Kell. He wakes once a century, "
    "asks every traveller a riddle, and lets those who answer well cross the pass unharmed."
)
HOARD = (
    "The hoard under Mount Kell is cursed. Whoever takes one coin from it forgets their own "
    "name before the next full moon, and the coin is back in the hoard by the next morning."
)
# (dragon priority, dragon insertion_order, hoard priority, hoard insertion_order) -> dropped.
# The lowest priority is dropped first; between equal priorities, the later insertion_order.
CASES = {
    "the dragon has the higher priority": ((20, 2, 10, 1), "the hoard"),
    "the hoard has the higher priority": ((10, 1, 20, 2), "the dragon"),
    "equal priority, the dragon comes first": ((10, 1, 10, 2), "the hoard"),
    "equal priority, the hoard comes first": ((10, 2, 10, 1), "the dragon"),
}
CONTENTS = {"the dragon": DRAGON, "the hoard": HOARD}
# A key of each entry that the other does not have.
OWN_KEY = {"the dragon": "Vermithrax", "the hoard": "hoard"}


def _config(tmp_path: Path, claude: str, ranks: tuple[int, int, int, int]) -> list[str]:
    dragon_priority, dragon_order, hoard_priority, hoard_order = ranks
    (tmp_path / "lore.toml").write_text(
        f"""[llm]
base_url = "{claude}"
max_retries = 0

[queue]
debounce_seconds = 0.1

[[personas]]
id = "mira"
name = "Mira"
description = "A keeper of a lighthouse."
first_message = ["Hello."]

[personas.lorebook]
token_budget = {BUDGET}
scan_depth = 1

[[personas.lorebook.entries]]
name = "the dragon"
keys = ["dragon", "Vermithrax"]
content = "{DRAGON}"
priority = {dragon_priority}
insertion_order = {dragon_order}

[[personas.lorebook.entries]]
name = "the hoard"
keys = ["dragon", "hoard"]
content = "{HOARD}"
priority = {hoard_priority}
insertion_order = {hoard_order}
""",
        encoding="utf-8",
    )
    return ["--config", "lore.toml"]


async def _prompt(tmp_path: Path, config: list[str], message: str) -> str:
    user = getpass.getuser()
    code, out, err = await _run(
        ["prompt", *config, "--platform", "console", "--chat", user, "--message", message],
        tmp_path,
    )
    assert code == 0, err
    return out


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_entry_ranked_last_is_dropped_and_reported(tmp_path: Path, case: str) -> None:
    """Issue 18: an over-budget entry is dropped by priority and `personabot prompt` says so;
    with the ranks swapped, the other one is."""
    ranks, dropped = CASES[case]
    (kept,) = set(CONTENTS) - {dropped}
    async with FakeMessagesAPI(reply_text="Mm.") as claude:
        config = _config(tmp_path, claude.base_url, ranks)
        env = clean_env(ANTHROPIC_API_KEY="sk-test-lore-budget")
        code, _, err = await _run(["chat", *config], tmp_path, "tell me about the dragon\n", env)
        assert code == 0, err
        (request,) = claude.requests

    # The real turn: the kept entry is in the request, the dropped one nowhere, and the drop
    # is logged with its reason.
    lore = [t for t in request.text_of("user") if t.startswith("<lorebook>")]
    assert len(lore) == 1 and CONTENTS[kept] in lore[0]
    assert CONTENTS[dropped] not in str(request.body)
    assert re.search(rf"lorebook entry '{dropped}' left out of .*: budget", err), err
    assert f"lorebook entry '{kept}'" not in err

    # `personabot prompt` for the same message: fired, and dropped for the budget although
    # the dropped entry fits it alone (its tokens are at most the budget).
    out = await _prompt(tmp_path, config, "the dragon?")
    fired = re.search(rf"fired    '{kept}': key 'dragon' \(~(\d+) tokens\)", out)
    skipped = re.search(
        rf"skipped  '{dropped}': budget \((\d+) tokens, (\d+) of {BUDGET} left\)", out
    )
    assert fired and skipped, out
    kept_tokens, dropped_tokens, left = (int(n) for n in (*fired.groups(), *skipped.groups()))
    assert dropped_tokens <= BUDGET and kept_tokens <= BUDGET < kept_tokens + dropped_tokens
    assert left == BUDGET - kept_tokens
    assert CONTENTS[kept] in out and CONTENTS[dropped] not in out

    # Alone (its own key said), the dropped entry fires.
    out = await _prompt(tmp_path, config, f"what about the {OWN_KEY[dropped]}?")
    assert f"fired    '{dropped}'" in out and CONTENTS[dropped] in out
    assert f"skipped  '{kept}': no key match" in out
