from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.store.base import BaseStore
from tests.web.security.rig import Rig, open_rig


@pytest.fixture
async def rig(store: BaseStore) -> AsyncIterator[Rig]:
    async for made in open_rig(store):
        yield made
