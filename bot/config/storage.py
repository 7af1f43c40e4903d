"""``[storage]``: where conversations are stored (SQLite or PostgreSQL)."""

from __future__ import annotations

from typing import Final

from pydantic import Field, field_validator, model_validator

from bot.config.fields import Section

#: What the stores open (bot/app/build.py store()).
STORAGE_PREFIXES: Final = ("sqlite://", "postgresql://", "postgres://")


class StorageSettings(Section):
    """Where conversations are stored."""

    url: str = "sqlite:///personabot.sqlite3"
    busy_timeout_ms: int = Field(default=5000, ge=0)
    connect_timeout_seconds: float = Field(default=10.0, gt=0)
    min_pool_size: int = Field(default=1, ge=0)
    max_pool_size: int = Field(default=10, ge=1)

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        # Checked with the file (config check), not when the store opens; the value is never
        # quoted: an API key pasted here was printed back in the summary (review 35a).
        if not url.startswith(STORAGE_PREFIXES) or url.rstrip("/") == "sqlite:":
            raise ValueError(
                "not a storage URL: use sqlite:///relative/path.sqlite3, sqlite:////absolute/path "
                "or postgresql://user@host:5432/dbname"
            )
        return url

    @model_validator(mode="after")
    def _pool_sizes(self) -> StorageSettings:
        if self.min_pool_size > self.max_pool_size:
            raise ValueError(
                f"min_pool_size ({self.min_pool_size}) must not exceed "
                f"max_pool_size ({self.max_pool_size})"
            )
        return self
