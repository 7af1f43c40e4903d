"""personabot's one top-level name in an installed environment (issue 35, item 6).

The repository keeps its layout (``bot/``, ``adapters/``, ``memory/`` at the top, imported by
those names), but the built wheel installs them inside this package, as
``personabot/bot/``, ``personabot/adapters/`` and ``personabot/memory/``: installing
personabot next to the public packages named ``adapters`` or ``memory`` no longer overwrites
their files. Importing ``personabot`` (the console script and ``python -m personabot`` do)
puts that folder first on ``sys.path``, so the code and plugins keep importing ``bot``,
``adapters`` and ``memory`` as before. Inside a personabot process those three names are
personabot's; a plugin that needs another package of one of those names cannot import it
(docs/deploy.md#one-environment-per-service). In the source tree (and its editable install)
the folder holds only this module and nothing is added.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The names the wheel installs inside this package.
BUNDLED = ("bot", "adapters", "memory")

_HERE = Path(__file__).resolve().parent
if (_HERE / "bot" / "__init__.py").is_file() and str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))


def main() -> int:
    """The ``personabot`` console script."""
    from bot.app.cli import main as cli_main

    return cli_main()
