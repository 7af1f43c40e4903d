"""The composition root: the App (plugins, wiring) and the process around it (CLI, serve).

``App`` is imported on first use: ``python -m bot`` installs its startup signal handlers
before the runtime's modules load (bot/app/cli.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.app.app import App

__all__ = ["App"]


def __getattr__(name: str) -> Any:
    if name == "App":
        from bot.app.app import App

        return App
    raise AttributeError(f"module 'bot.app' has no attribute {name!r}")
