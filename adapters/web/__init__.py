"""The console's playground as a platform (docs/web.md#playground)."""

from adapters.web.outlet import PLATFORM, WebOutlet

__all__ = ["PLATFORM", "WebOutlet"]
