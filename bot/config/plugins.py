"""What the settings say about plugins: how a plugin and what it registers (a platform, a
model provider) are named, and the problem of a name nobody registered
(docs/architecture.md#plugins)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Annotated, Final

from pydantic import Field

#: A registry name (platform, model provider): letters, digits, ``_``, ``.`` and ``-``.
NAME_PATTERN: Final = r"^[A-Za-z0-9_.-]{1,64}$"
#: A plugin: a module path (``package.module``) or an entry point's name.
PluginName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")]


def unknown_name(kind: str, key: str, name: str, installed: Iterable[str]) -> str:
    """The problem of a platform or provider nobody registered, listing what is installed."""
    known = sorted(installed)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (
        f"{key}: unknown {kind} {name!r} (installed: {', '.join(known) or 'none'}; "
        f"a plugin can add more{hint})"
    )
