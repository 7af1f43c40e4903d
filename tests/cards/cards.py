"""Cards written by the tests in the three containers, and the CLI run as a real process."""

from __future__ import annotations

import base64
import copy
import io
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

from PIL import Image
from PIL.PngImagePlugin import PngInfo

from tests.processes import clean_env, run

# Unknown extensions as cards carry them: nested, with null, unicode, numbers of every kind.
EXTENSIONS: dict[str, Any] = {
    "depth_prompt": {"depth": 4, "prompt": None, "role": "system"},
    "talkativeness": "0.5",
    "fav": False,
    "ünïcödé ✓": ["日本語", "emoji 😀", None, 0, -1, 2.5, 1e-7, 12345678901234567890],
    "nested": {"a": {"b": {"c": [[], {}, [None, {"d": True}]]}}},
}


def v2_card(**data: Any) -> dict[str, Any]:
    """A full V2 card with a lorebook; ``data`` overrides its fields."""
    base: dict[str, Any] = {
        "name": "Mira Kell",
        "description": "{{char}} keeps the lighthouse on Kell Point.\nShe speaks softly.",
        "personality": "warm, curious, stubborn",
        "scenario": "A stormy night; {{user}} knocks at the door.",
        "first_mes": "Oh! Come in, {{user}}, you're soaked.",
        "mes_example": "<START>\n{{user}}: Hi\n{{char}}: Hello there.",
        "creator_notes": "Best with a warm model. Never shown to the model.",
        "system_prompt": "You are {{char}}. Stay in character.",
        "post_history_instructions": "Answer in under 80 words.",
        "alternate_greetings": ["The lamp flickers. Who's there?", "Back again, {{user}}?"],
        "tags": ["lighthouse", "cozy"],
        "creator": "tests",
        "character_version": "1.2",
        "extensions": copy.deepcopy(EXTENSIONS),
        "character_book": {
            "name": "Kell Point",
            "description": "The world",
            "scan_depth": 6,
            "token_budget": 700,
            "recursive_scanning": False,
            "extensions": {"book_ext": {"x": None}},
            "entries": [
                {
                    "keys": ["lighthouse", "lamp"],
                    "content": "The lighthouse has been dark since the storm of '09.",
                    "extensions": {"position": 1, "probability": 100, "ü": None},
                    "enabled": True,
                    "insertion_order": 50,
                    "case_sensitive": True,
                    "name": "lighthouse",
                    "priority": 3,
                    "id": 7,
                    "comment": "the lighthouse",
                    "selective": True,
                    "secondary_keys": ["storm"],
                    "constant": False,
                    "position": "after_char",
                },
                {
                    "keys": ["Orin"],
                    "content": "Orin is the ferryman.",
                    "extensions": {},
                    "enabled": False,
                    "insertion_order": 100,
                    "comment": "orin",
                    "position": "before_char",
                },
            ],
        },
    }
    base.update(data)
    return {"spec": "chara_card_v2", "spec_version": "2.0", "data": base}


def v3_card(**data: Any) -> dict[str, Any]:
    """A full V3 card (V2's fields plus V3's); ``data`` overrides its fields."""
    card = v2_card()
    card["spec"], card["spec_version"] = "chara_card_v3", "3.0"
    card["data"].update(
        {
            "nickname": "Mimi",
            "creator_notes_multilingual": {"de": "Für warme Modelle."},
            "source": ["https://example.org/mira"],
            "group_only_greetings": ["Hello, all of you."],
            "creation_date": 1700000000,
            "modification_date": 1700000001,
            "assets": [{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"}],
        }
    )
    card["data"]["character_book"]["entries"][0]["use_regex"] = True
    card["data"]["character_book"]["entries"][1]["use_regex"] = False
    card["top_level_unknown"] = {"kept": [1, None]}
    card["data"].update(data)
    return card


def b64(card: Any) -> str:
    text = card if isinstance(card, str) else json.dumps(card, ensure_ascii=False)
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def png_bytes(chunks: dict[str, str], size: tuple[int, int] = (24, 36)) -> bytes:
    """A PNG with these tEXt chunks (keyword -> value)."""
    info = PngInfo()
    for keyword, value in chunks.items():
        info.add_text(keyword, value)
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 40, 90)).save(buffer, format="PNG", pnginfo=info)
    return buffer.getvalue()


def write_card(path: Path, card: dict[str, Any]) -> Path:
    """``card`` in the container its suffix names (.json, .png with a ``chara`` or ``ccv3``
    chunk by spec, .charx with card.json at its root)."""
    if path.suffix == ".json":
        path.write_text(json.dumps(card, ensure_ascii=False), encoding="utf-8")
    elif path.suffix == ".png":
        keyword = "ccv3" if card.get("spec") == "chara_card_v3" else "chara"
        path.write_bytes(png_bytes({keyword: b64(card)}))
    else:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("card.json", json.dumps(card, ensure_ascii=False))
            archive.writestr("assets/icon/images/main.png", png_bytes({}))
    return path


def personabot(*args: str, cwd: Path, stdin: str | None = None) -> tuple[int, str, str]:
    """The ``personabot`` command line as a process (its real entry point, ``python -m bot``),
    given ``stdin`` (else none)."""
    done = run([sys.executable, "-m", "bot", *args], cwd=cwd, env=clean_env(), input=stdin)
    return done.returncode, done.stdout, done.stderr


def limit_key(entry: int, position: int, kind: str = "q") -> str:
    """The core of a key of ``limit_entries``: no other key of the book contains it (``s`` for
    a secondary key)."""
    return f"k{entry:04d}{kind}{position:02d}z"


def limit_entries() -> list[dict[str, Any]]:
    """Lorebook entries (card form) at every limit of memory/lorebook.py at once: MAX_ENTRIES
    entries; entry 0 with MAX_ENTRY_KEYS keys and secondary keys (selective); entry 1 with a
    key of MAX_KEY_CHARS; entry 2 with a pattern of MAX_PATTERN_CHARS; entry 3 with content
    of MAX_CONTENT_CHARS; entries 2 to 1001 regex (one pattern each, MAX_BOOK_PATTERNS); and
    MAX_BOOK_KEYS keys, MAX_BOOK_KEY_CHARS characters of keys and MAX_BOOK_CHARS characters
    in all (names included). Entry ``i`` is named ``e<i>``; every key holds a ``limit_key``
    core."""
    from memory import lorebook as lb

    entries: list[dict[str, Any]] = [
        {
            "name": "e0",
            "keys": [limit_key(0, j) for j in range(lb.MAX_ENTRY_KEYS)],
            "secondary_keys": [limit_key(0, j, "s") for j in range(lb.MAX_ENTRY_KEYS)],
            "selective": True,
        },
        {"name": "e1", "keys": [limit_key(1, 0).rjust(lb.MAX_KEY_CHARS, "a")]},
    ]
    patterns = range(2, 2 + lb.MAX_BOOK_PATTERNS)
    for i in patterns:
        entries.append({"name": f"e{i}", "keys": [limit_key(i, 0)], "use_regex": True})
    # The longest pattern: the core, then a regex comment to fill it.
    core = limit_key(2, 0)
    entries[2]["keys"] = [core + "(?#" + "a" * (lb.MAX_PATTERN_CHARS - len(core) - 4) + ")"]
    plain = lb.MAX_ENTRIES - len(entries)
    spare_keys = lb.MAX_BOOK_KEYS - sum(
        len(e["keys"]) + len(e.get("secondary_keys", [])) for e in entries
    )
    for n in range(plain):
        i = len(entries)
        count = spare_keys // plain + (n < spare_keys % plain)
        entries.append({"name": f"e{i}", "keys": [limit_key(i, j) for j in range(count)]})
    # Pad the plain keys of the later entries (front: the core stays whole) up to the total.
    key_chars = sum(len(k) for e in entries for k in (*e["keys"], *e.get("secondary_keys", [])))
    missing = lb.MAX_BOOK_KEY_CHARS - key_chars
    for entry in reversed(entries[2 + lb.MAX_BOOK_PATTERNS :]):
        for j, key in enumerate(entry["keys"]):
            grow = min(missing, lb.MAX_KEY_CHARS - len(key), 40)
            entry["keys"][j] = "b" * grow + key
            missing -= grow
        if not missing:
            break
    assert missing == 0
    # Contents: entry 3 at the entry limit, the rest sharing what is left of the book's.
    names = sum(len(e["name"]) for e in entries)
    text = lb.MAX_BOOK_CHARS - lb.MAX_BOOK_KEY_CHARS - lb.MAX_CONTENT_CHARS - names
    others = len(entries) - 1
    for i, entry in enumerate(entries):
        size = lb.MAX_CONTENT_CHARS if i == 3 else text // others + (i - (i > 3) < text % others)
        head = f"Lore of entry {i}. "
        entry["content"] = (
            head + ("The tide turns at Kell Point. " * (size // 30 + 1))[: size - len(head)]
        )
        entry["insertion_order"] = i
    return entries
