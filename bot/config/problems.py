"""A pydantic ``ValidationError`` as ``key.path: problem`` lines, one per error, as ``config
check`` prints them: the tagged union's tag dropped, a mistyped key's likely spelling
suggested, and an input value quoted only when it cannot be a secret."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from bot.config.bots import BUILTIN_PLATFORMS, PLATFORM_MODELS
from bot.config.settings import Settings


def validation_problems(exc: ValidationError) -> list[str]:
    """One ``key.path: problem`` line per error; input values are quoted only when harmless."""
    problems = []
    for err in exc.errors(include_url=False):
        # Drop pydantic's validator names and the tagged-union tag ("bots.0.telegram.mode").
        raw = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        loc = [
            p
            for i, p in enumerate(raw)
            if not (i and isinstance(raw[i - 1], int) and p in PLATFORM_MODELS)
        ]
        tag = next((p for p in raw if isinstance(p, str) and p in PLATFORM_MODELS), None)
        where, kind = _loc(loc), err["type"]
        known = " or ".join(map(repr, BUILTIN_PLATFORMS)) + " or a plugin's platform"
        if kind == "extra_forbidden":
            problems.append(f"{where}: unknown key{_suggest(loc, tag)}")
        elif kind == "missing":
            problems.append(f"{where}: field required")
        elif kind == "union_tag_not_found":
            problems.append(f"{where}.platform: field required ({known})")
        elif kind == "union_tag_invalid":
            problems.append(
                f"{where}.platform: must be {known}{_got(['platform'], err['ctx']['tag'])}"
            )
        elif kind == "value_error":
            msg = str(err["msg"]).removeprefix("Value error, ")
            if not loc:
                problems += msg.split("\n")
            elif re.match(r"^[\w\[\].]+: ", msg):
                problems.append(f"{where}.{msg}")
            else:
                problems.append(f"{where}: {msg}")
        else:
            problems.append(f"{where}: {err['msg']}{_got(loc, err.get('input'))}")
    return problems or ["invalid configuration"]


def _loc(parts: Sequence[int | str]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


# Keys whose values may be, or may contain, credentials: their input is never quoted.
_SECRET_KEY_PARTS: Final = ("token", "secret", "password", "key", "url", "dsn", "api", "env")
_HARMLESS_TEXT: Final = re.compile(r"^[\w .,+-]{0,32}$")
# A run of letters and digits such as `openssl rand -hex 16` writes: a token, not a word.
_RANDOM_LOOKING: Final = re.compile(r"(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{12,}")


def _got(loc: Sequence[int | str], value: object) -> str:
    """`` (got 5)`` for a harmless input; nothing for text that might be a secret or a table.

    A wrong value may be a credential pasted into the wrong key, and a table (``[[bots]]``)
    may hold a token: so tables, lists, long or URL-like text and values of credential-like
    keys are never echoed. Numbers, booleans and short plain words are.
    """
    name = next((str(p).lower() for p in reversed(loc) if isinstance(p, str)), "")
    if isinstance(value, bool | int | float):
        return f" (got {value!r})"
    if (
        isinstance(value, str)
        and _HARMLESS_TEXT.match(value)
        and not _RANDOM_LOOKING.search(value)
        and not any(part in name for part in _SECRET_KEY_PARTS)
    ):
        return f" (got {value!r})"
    return ""


def _suggest(loc: Sequence[int | str], tag: str | None) -> str:
    name = loc[-1] if loc else ""
    model: type[BaseModel] = Settings
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        inner = PLATFORM_MODELS.get(tag or "") if part == "bots" else None
        inner = inner or (_model_of(field.annotation) if field else None)
        if inner is None:
            return ""
        model = inner
    close = difflib.get_close_matches(str(name), list(model.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None
