"""Secrets: read from the environment only, never from the TOML file (which names the
variable, ``token_env``), never stored in settings or logs."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Final

#: Shorter secrets are not redacted as substrings (they would mangle every line).
MIN_SECRET: Final = 6


class Secrets:
    """Reads secrets from the environment only; never stores them in settings or logs."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ
        # Every name asked for is a secret, whatever it is called (a plugin's MY_LLM_KEY):
        # values() includes them, so logs and error lines redact them too.
        self._asked: set[str] = set()
        self._values: tuple[tuple[tuple[str, ...], int], tuple[str, ...]] | None = None

    @property
    def anthropic_api_key(self) -> str | None:
        """The Anthropic API key, or None when unset or blank."""
        return self.get("ANTHROPIC_API_KEY")

    def get(self, name: str) -> str | None:
        """A secret by environment variable name, or None when unset or blank."""
        self._asked.add(name)
        return self._value(name)

    def _value(self, name: str) -> str | None:
        value = self._environ.get(name, "").strip()
        return value or None

    def values(self, extra_names: Iterable[str] = ()) -> list[str]:
        """Every secret currently set (for log redaction), including the variables that the
        configuration names (``token_env``, ``secret_token_env``) and every one read so far."""
        # Asked at every log record: the environment is scanned again only when a new name was
        # read or other names are asked for, not per record.
        key = (tuple(extra_names), len(self._asked))
        if self._values is not None and self._values[0] == key:
            return list(self._values[1])
        names = ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "PGPASSWORD", *key[0]]
        names += sorted(self._asked)
        names += [n for n in self._environ if n.endswith(("_TOKEN", "_SECRET", "_API_KEY"))]
        found = [v for v in (self._value(n) for n in names) if v and len(v) >= MIN_SECRET]
        self._values = (key, tuple(found))
        return found
