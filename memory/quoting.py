"""How text derived from users is quoted into prompts so that it can never change their shape.

Every prompt personabot builds has structure the model relies on: the system prompt's blocks
(the data note, ``<user_memory>``, ``<conversation_summary>``, ``<gap_notice>``), the
transcripts sent to the summary and extraction tasks (one line per message, saying who said
it), and the per-author parts of a group turn. Display names, user ids, remembered values,
summary entries and message texts all come from users (directly, or through the model that
read what users wrote), so none of them may be able to open or close a block or start a line
that reads as another message or another author.

Two encodings, chosen by what the model has to do with the text:

- **Data the model must read exactly** (memory values, summary entries, names and ids inside
  blocks, task transcripts) is written as JSON, one object per line (``data_json``). JSON
  escapes quotes, backslashes and every control character, so a value never ends its string
  or its line; on top of that ``<``, ``>`` and ``&`` are written as ``\\u003c``, ``\\u003e``,
  ``\\u0026`` (JSON syntax itself never uses them, so this only touches string contents), so no
  value can spell a block tag, and the Unicode line separators (U+0085, U+2028, U+2029) are
  escaped too, so no value can look like a line break to anything that reads the prompt. The
  value decodes back byte for byte, and models read JSON escapes without effort; the summary
  task's answers (items to remove, copied exactly) are compared after decoding.
- **Speech in a group turn** (the user message the persona answers) stays prose, because
  that is what the persona talks to: each part starts with a header line naming its author
  with JSON-quoted name and id (``"Sasha" (user "11"):``), and every line of the message is
  indented by two spaces (``indented``). A line that starts at the left margin is therefore
  always a header we wrote; text inside a message can never start one, whatever it contains.

Both are pure and deterministic (same input, byte-identical output), which keeps the
provider's prompt cache stable across turns.
"""

from __future__ import annotations

import json
from typing import Final

# Escapes applied to JSON text: characters that could spell a tag, plus the line separators
# JSON leaves raw. Safe because after json.dumps they can only occur inside string literals.
_JSON_ESCAPES: Final = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u0085": "\\u0085",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)
_TEXT_ESCAPES: Final = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
INDENT: Final = "  "


def data_json(value: object) -> str:
    """One-line JSON of ``value`` in which no character can close a block or break the line."""
    return json.dumps(value, ensure_ascii=False).translate(_JSON_ESCAPES)


def tag_safe(text: str) -> str:
    """Free text for the inside of a block, with ``&``, ``<`` and ``>`` escaped as entities."""
    return text.translate(_TEXT_ESCAPES)


def indented(text: str) -> str:
    """Every line of ``text`` indented (empty ones too, so none is lost), joined by ``\\n``.

    Splits on every character Python treats as a line boundary (``\\r``, U+2028, ...), not
    only ``\\n``, so that no such character leaves a line at the margin.
    """
    return "\n".join(INDENT + line for line in text.splitlines())
