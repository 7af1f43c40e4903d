"""Message catalogs of personabot's built-in texts (docs/i18n.md#adding-a-text):

    uv run python scripts/catalogs.py extract   # bot/, memory/, adapters/ -> the .pot
    uv run python scripts/catalogs.py update    # .pot -> each language's .po (new texts empty)
    uv run python scripts/catalogs.py compile   # each .po -> its .mo (committed)

A test (tests/bot/test_catalogs.py) fails when a committed .mo differs from what ``compile``
makes of its .po, when a text lacks a translation, or when a translation's placeholders differ
from the English. Babel is a development tool only; the runtime reads the .mo files with the
standard library's gettext.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

from babel.messages.frontend import CommandLineInterface
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parent.parent
LOCALES = ROOT / "bot" / "locales"
TEMPLATE = LOCALES / "personabot.pot"
DOMAIN = "personabot"
#: Where built-in texts are written (of the adapters, a Telegram button press's answers).
SOURCES = ("bot", "memory", "adapters")


def _babel(*args: str) -> None:
    CommandLineInterface().run(["pybabel", "-q", *args])


def extract() -> None:
    """The marked texts of the sources (``_``, ``N_``, ``ngettext``) into the template."""
    _babel(
        "extract",
        "--no-location",
        "--sort-output",
        "--project=personabot",
        "-o",
        str(TEMPLATE),
        *(str(ROOT / source) for source in SOURCES),
    )


def update() -> None:
    """Merge the template into every language's .po (no fuzzy guesses: a new text is empty,
    so the completeness test names it)."""
    _babel("update", "--no-fuzzy-matching", "-D", DOMAIN, "-i", str(TEMPLATE), "-d", str(LOCALES))


def compiled(po: Path) -> bytes:
    """The .mo that ``compile`` writes for ``po``."""
    with po.open("rb") as file:
        catalog = read_po(file)
    out = io.BytesIO()
    write_mo(out, catalog)
    return out.getvalue()


def po_files() -> list[Path]:
    """Each shipped language's .po."""
    return sorted(LOCALES.glob(f"*/LC_MESSAGES/{DOMAIN}.po"))


def compile_all() -> None:
    """Every .po into the .mo beside it."""
    for po in po_files():
        po.with_suffix(".mo").write_bytes(compiled(po))


if __name__ == "__main__":
    commands = {"extract": extract, "update": update, "compile": compile_all}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(commands)}")
    commands[sys.argv[1]]()
