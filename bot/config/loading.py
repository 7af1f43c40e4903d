"""``load_settings``: read the TOML file (bounded), validate it with the environment's
overrides, and on failure raise one ``ConfigError`` that names every problem of the round and
where each came from: the file, a ``PERSONABOT_*`` variable, or the environment's secrets."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError
from pydantic_settings import SettingsError

from bot.config.environment import env_problem, env_sources, unknown_sections
from bot.config.needs import RunNeeds
from bot.config.problems import validation_problems
from bot.config.references import raw_problems
from bot.config.secrets import Secrets
from bot.config.settings import Settings
from bot.core.errors import ConfigError

DEFAULT_CONFIG_PATH = Path("personabot.toml")
#: A configuration file larger than this is refused unread (``--config /dev/zero`` took
#: gigabytes, review 35a); lorebooks, the largest part, are bounded far below it.
MAX_CONFIG_BYTES: Final = 32 * 1024 * 1024


def bundled_example_path() -> Path:
    """The example configuration shipped with personabot (its values are the defaults)."""
    # bot/ of a checkout (the example is at its root), or personabot/bot/ of the wheel (the
    # example is personabot/config.example.toml).
    here = Path(__file__).resolve().parents[1]
    for candidate in (here / "config.example.toml", here.parent / "config.example.toml"):
        if candidate.is_file():
            return candidate
    raise ConfigError(["config.example.toml is missing from this installation"])


def load_settings(path: Path | None = None, *, needs: Secrets | None = None) -> Settings:
    """Load and validate settings (TOML, then ``PERSONABOT_*`` environment overrides).

    ``path`` None means ``./personabot.toml`` when it exists, else the bundled example.
    Raises ConfigError naming each bad key; with ``needs`` (the secrets ``run`` will read),
    also what the environment lacks, in the same round (issue 35).
    """
    if path is None:
        path = DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.is_file() else bundled_example_path()
    data = _read_toml(path)
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        problems = validation_problems(exc)
        problems += [p for p in raw_problems(data) if p not in problems]
        sources = env_sources(problems, os.environ) or [None] * len(problems)
        lost = unknown_sections(os.environ)
        problems += lost
        sources += [""] * len(lost)
        raw = RunNeeds.of_raw(data) if needs is not None else None
        if raw is not None and needs is not None:
            missing = raw.problems(needs, empty_ok=True)
            problems += missing
            sources += [""] * len(missing)  # each names its variable
        raise ConfigError(problems, source=str(path), sources=sources) from None
    except SettingsError as exc:
        # A PERSONABOT_* override of a table or list that is not JSON; the value may hold a
        # credential, so only the variable is named.
        raise ConfigError([env_problem(exc)]) from None
    if lost := unknown_sections(os.environ):
        raise ConfigError(lost, sources=[""] * len(lost))
    return settings


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError([f"file not found: {path}"]) from None
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror}"]) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            [f"larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB: not a configuration file"],
            source=str(path),
        )
    try:
        # utf-8-sig: a byte-order mark, which some Windows editors write, is skipped
        # (tomllib refused it as "Invalid statement (at line 1, column 1)", review 35b).
        return tomllib.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise ConfigError(["not a TOML file (not UTF-8 text)"], source=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"not valid TOML: {exc}"], source=str(path)) from None
