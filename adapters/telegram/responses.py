"""Answers of the Bot API read without rebuilding their model class on every call.

aiogram reads every answer as ``Response[method.__returning__]`` (``BaseSession
.check_response``), a pydantic generic model parametrized on the spot. pydantic keeps a
parametrized model only in a weak cache: once nothing references it, the next garbage
collection drops it and the next answer builds the class again (a model class: schema, core
validator). Under load the process rebuilt ``Response[Message]``, ``Response[bool]`` and
``Response[list[Any]]`` over and over, about a twentieth of its busy time (bench/load.py,
issue 23). Holding each one the session has parametrized keeps the cache entry alive.
"""

from __future__ import annotations

import functools
from typing import Any

from aiogram.methods.base import Response


@functools.cache
def response_type(returning: Any) -> type[Response[Any]]:
    """``Response[returning]``, kept alive for the life of the process (one per Bot API
    result type: a few dozen at most)."""
    return Response[returning]
