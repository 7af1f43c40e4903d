"""``personabot persona export``: a persona as a Character Card V3, JSON or PNG.

The card is the persona's TOML fields merged over its stored card (bot/personas/mapping.py),
so what the operator edited wins and everything personabot does not map is kept. A PNG is the
kept image (``cards/<id>.png`` beside the stored card) or a plain one, with the card in tEXt
``chara`` (V2) and ``ccv3`` (V3) chunks as SillyTavern writes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from bot.config import DEFAULT_CONFIG_PATH, PersonaSettings, bundled_example_path, load_settings
from bot.core.errors import CardError
from bot.personas.card import as_v2, normalise
from bot.personas.containers import parse_json, read_bounded
from bot.personas.merge import card_from_persona
from bot.personas.png import PNG_MAGIC, plain_image, with_card
from bot.personas.toml_file import write_atomically

Format = Literal["json", "png"]


def config_path(config: Path | None) -> Path:
    """The file ``load_settings(config)`` reads (cards are relative to it)."""
    if config is not None:
        return config
    return DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.is_file() else bundled_example_path()


def _persona(personas: list[PersonaSettings], persona_id: str) -> PersonaSettings:
    for persona in personas:
        if persona.id == persona_id:
            return persona
    known = ", ".join(p.id for p in personas)
    raise CardError(f"no persona with id {persona_id!r} (known: {known})")


def stored_card(
    persona: PersonaSettings, config: Path
) -> tuple[dict[str, Any] | None, Path | None]:
    """The persona's stored card (normalised) and the path of its kept image, if any."""
    if persona.card is None:
        return None, None
    path = config.parent / persona.card
    if not path.is_file():
        raise CardError(
            f"{path}: the card of persona {persona.id!r} is missing (remove its `card` key "
            "to export from the TOML fields alone)"
        )
    card = normalise(parse_json(read_bounded(path, "stored card"), str(path)))
    image = path.with_suffix(".png")
    return card, image if image.is_file() else None


def build_card(persona: PersonaSettings, config: Path) -> tuple[dict[str, Any], Path | None]:
    """The V3 card of ``persona`` and its kept image."""
    stored, image = stored_card(persona, config)
    return card_from_persona(persona, stored), image


def export_persona(
    persona_id: str,
    *,
    config: Path | None,
    fmt: Format,
    out: Path | None = None,
    overwrite: bool = False,
) -> str:
    """Write the persona's card to ``out`` (default ``<id>.<fmt>``); returns a summary line.
    An existing file is replaced only with ``overwrite`` (it may be the card someone gave
    you: it used to be replaced without a word)."""
    target = out or Path(f"{persona_id}.{fmt}")
    if target.exists() and not overwrite:
        raise CardError(f"{target} exists: pass --force to replace it, or --out another file")
    path = config_path(config)
    settings = load_settings(path)
    persona = _persona(list(settings.personas), persona_id)
    card, image_path = build_card(persona, path)
    if fmt == "json":
        data = (json.dumps(card, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
        source = "JSON"
    else:
        image = read_bounded(image_path, "kept image") if image_path else plain_image()
        if not image.startswith(PNG_MAGIC):
            raise CardError(f"{image_path}: the kept image is not a PNG")
        data = with_card(
            image,
            v2_json=json.dumps(as_v2(card), ensure_ascii=False),
            v3_json=json.dumps(card, ensure_ascii=False),
        )
        source = f"PNG ({'the kept image' if image_path else 'a plain image'})"
    write_atomically(target, data)
    origin = "its TOML fields over the stored card" if persona.card else "its TOML fields"
    return (
        f"exported persona {persona_id!r} as a Character Card V3 {source} to {target}, "
        f"from {origin}"
    )
