"""The console rig (a console over a real store, logged in by a real HTTP client) for every
test of this folder."""

from tests.web.test_console import rig

__all__ = ["rig"]
