"""What one entry cannot know alone: every bot names a persona that exists, no two bots share
a key, and (before any plugin could register one) every platform is known. Said of valid
settings and, best effort, of a raw file whose keys are wrong, so that a persona typo is not
left for a second round (issue 35)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from bot.config.bots import BUILTIN_PLATFORMS, raw_key
from bot.config.personas import DEFAULT_PERSONA
from bot.config.plugins import unknown_name


def reference_problems(
    ids: Sequence[str], bots: Sequence[tuple[str, Sequence[str], str]]
) -> list[str]:
    """Every persona id listed twice, every bot naming an unknown persona and every bot key
    used twice; ``bots`` as ``(persona, personas, key)``. Also run on the raw file when a
    key is wrong, so that a persona typo is not left for a second round (issue 35)."""
    problems = []
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        problems.append(f"personas: duplicate id {', '.join(map(repr, dupes))}")
    for index, (persona, personas, _) in enumerate(bots):
        for persona_id in dict.fromkeys([persona, *personas]):
            if persona_id and persona_id not in ids:
                field = "persona" if persona_id == persona else "personas"
                close = difflib.get_close_matches(persona_id, ids, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                problems.append(
                    f"bots[{index}].{field}: no persona with id {persona_id!r} "
                    f"(known: {', '.join(ids)}{hint})"
                )
    keys = [key for _, _, key in bots]
    if len(set(keys)) != len(keys):
        problems.append("bots: two entries share an id; give each an explicit id")
    return problems


def raw_problems(data: Mapping[str, Any]) -> list[str]:
    """What the model's after-validators and ``App.prepare`` would also say about a file
    whose keys are wrong: persona references and, when no plugin is named (none could
    register one), platform names. Best effort over the raw TOML; a malformed part is left
    to the key errors already reported."""
    personas = data.get("personas", [{"id": DEFAULT_PERSONA.id}])
    raw_bots = data.get("bots", [])
    if not isinstance(personas, list) or not isinstance(raw_bots, list):
        return []
    ids = [p["id"] for p in personas if isinstance(p, dict) and isinstance(p.get("id"), str)]
    bots: list[tuple[str, Sequence[str], str]] = []
    problems: list[str] = []
    plugins = bool(data.get("plugins"))
    for index, entry in enumerate(raw_bots):
        if not isinstance(entry, dict):
            return []
        persona, listed = entry.get("persona", ""), entry.get("personas", [])
        if not isinstance(persona, str) or not isinstance(listed, list):
            return []
        platform = entry.get("platform")
        bots.append((persona, [p for p in listed if isinstance(p, str)], raw_key(index, entry)))
        if (
            isinstance(platform, str)
            and platform not in BUILTIN_PLATFORMS
            and not plugins
            and not entry.get("plugins")
        ):
            problems.append(
                unknown_name("platform", f"bots[{index}].platform", platform, BUILTIN_PLATFORMS)
            )
    return reference_problems(ids, bots) + problems
