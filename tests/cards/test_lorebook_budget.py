"""A lorebook entry larger than the lorebook's whole ``token_budget`` can never be sent
(issue 35: the default SillyTavern card's main entry, ~519 tokens, under the default budget
of 500). The import says so, naming the entry, its tokens, the budget and the TOML line that
fits it; a running bot says it once, when the persona is loaded, not in the middle of the
chat on every message that would fire it; ``personabot prompt`` shows it as "too large"."""

from __future__ import annotations

import getpass
import subprocess
import sys
from pathlib import Path

from bot.personas.importer import import_card
from tests.cards.cards import personabot, v2_card, write_card
from tests.processes import clean_env

# 1,545 one-byte characters: 515 tokens by the estimate (UTF-8 bytes / 3) plus 4 = 519.
BIG = "x" * 1545
WARNING = (
    "lorebook entry 'the glade' (~519 tokens) is larger than the token_budget of 500 and "
    "never sent: raise it under [personas.lorebook], token_budget = 600"
)


def _card() -> dict[str, object]:
    card = v2_card()
    book = card["data"]["character_book"]
    del book["token_budget"]  # the default budget, 500
    book["entries"].append({"keys": ["glade"], "content": BIG, "name": "the glade"})
    return card


def _reply_to(chat: subprocess.Popen[str], line: str) -> None:
    """Send ``line`` and wait for the answer to it."""
    assert chat.stdin is not None and chat.stdout is not None
    chat.stdin.write(line + "\n")
    chat.stdin.flush()
    # The offline model's answer ends with a line naming the prompt's layers.
    while not (got := chat.stdout.readline()).startswith("(prompt layers:"):
        assert got, "the chat ended before answering"


def test_the_import_names_an_entry_over_the_budget_and_the_line_to_fit_it(tmp_path: Path) -> None:
    write_card(tmp_path / "mira.json", _card())
    code, out, err = personabot("persona", "import", "mira.json", cwd=tmp_path)
    assert (code, err) == (0, "")
    assert f"  warning: {WARNING}\n" in out
    assert out.count("warning") == 1  # the other entries fit


def test_a_chat_is_told_once_and_the_prompt_report_says_too_large(tmp_path: Path) -> None:
    import_card(write_card(tmp_path / "mira.json", _card()), out=tmp_path / "personabot.toml")
    chat = subprocess.Popen(
        [sys.executable, "-m", "bot", "chat"],
        cwd=tmp_path,
        env=clean_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _reply_to(chat, "what is the glade?")
        _reply_to(chat, "tell me more about the glade")
        _, errors = chat.communicate(timeout=30)
    finally:
        chat.kill()
    assert chat.returncode == 0, errors
    said = [line for line in errors.splitlines() if "the glade" in line]
    assert len(said) == 1, errors
    assert said[0].endswith(f"WARNING personabot.app: persona 'mira-kell': {WARNING}")

    code, out, err = personabot(
        "prompt", "--platform", "console", "--chat", getpass.getuser(), "--message", "the glade",
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert "skipped  'the glade': too large (519 tokens, over the token_budget of 500)" in out
