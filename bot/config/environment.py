"""The ``PERSONABOT_*`` overrides as problems name them: which variable set a key the file is
blamed for, an override whose section does not exist (its value silently lost), and one that
is not JSON (never quoting its value)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence

from pydantic_settings import SettingsError

from bot.config.settings import ENV_PREFIX, Settings


def unknown_sections(environ: Mapping[str, str]) -> list[str]:
    """``PERSONABOT_QUEU__DEBOUNCE_SECONDS``: an override whose section is no section of the
    settings is ignored by the environment source, its value silently lost (review 35a).
    Only names with the nested delimiter are judged: ``PERSONABOT_WEB_TOKEN`` and other
    variables of the prefix that are not settings have none."""
    sections = list(Settings.model_fields)
    problems = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or "__" not in upper:
            continue
        section = upper.removeprefix(ENV_PREFIX).split("__", 1)[0].lower()
        if section not in sections:
            close = difflib.get_close_matches(section, sections, n=1)
            hint = f" (did you mean {ENV_PREFIX}{close[0].upper()}__...?)" if close else ""
            problems.append(f"{name} (environment): no settings section {section!r}{hint}")
    return problems


def env_sources(problems: Sequence[str], environ: Mapping[str, str]) -> list[str | None] | None:
    """For each ``key.path: problem``, the ``PERSONABOT_...`` variable that set its key or a
    table or list holding it (``PERSONABOT_QUEUE='{...}'``, ``PERSONABOT_BOTS='[...]'``); None
    where the file did, and None in all when no variable did (a typo'd variable was blamed on
    the TOML file, issue 35)."""
    variables = {name.upper() for name in environ if name.upper().startswith(ENV_PREFIX)}
    sources: list[str | None] = []
    for problem in problems:
        dotted = re.split(r"[\[ :]", problem, maxsplit=1)[0].split(".")
        names = [ENV_PREFIX + "__".join(dotted[:n]).upper() for n in range(len(dotted), 0, -1)]
        found = next((n for n in names if n in variables), None)
        sources.append(f"{found} (environment)" if found else None)
    return sources if any(sources) else None


def env_problem(exc: SettingsError) -> str:
    """Which environment override could not be parsed (never its value)."""
    match = re.search(r'field "(\w+)"', str(exc))
    field = match.group(1).upper() if match else "..."
    return (
        f"{ENV_PREFIX}{field}: not valid JSON (a table or list given in the environment must "
        f"be JSON; or set one key with {ENV_PREFIX}{field}__KEY)"
    )
