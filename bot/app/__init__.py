"""The composition root: the App (plugins, wiring) and the process around it (CLI, serve)."""

from bot.app.app import App

__all__ = ["App"]
