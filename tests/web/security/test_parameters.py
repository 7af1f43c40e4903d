"""Review 22: malformed and huge query parameters get a page or a 404, never a 500."""

from __future__ import annotations

import pytest

from tests.web.security.rig import DM, T0, TOKEN, Rig, answered

BAD = [
    "/conversations?after=1:99999999999999999999999",  # beyond a 64-bit row id
    "/conversations?after=nan:1",
    "/conversations?after=1e999:1",
    "/conversations/1?session=%C2%B2",  # "²".isdigit() but int("²") fails
    "/conversations/99999999999999999999999",
    "/audit?before=99999999999999999999999",
    "/audit?before=%C2%B2",
]


@pytest.mark.parametrize("path", BAD)
async def test_a_malformed_parameter_is_never_a_server_error(rig: Rig, path: str) -> None:
    await answered(rig.store, DM, "Ada", "hello", T0)
    await rig.login()
    async with rig.http.get(rig.base + path) as r:
        assert r.status in (200, 404), (path, r.status)
        assert "default-src 'none'" in r.headers["Content-Security-Policy"]
    api = "/api" + path
    async with rig.http.get(rig.base + api, headers={"Authorization": f"Bearer {TOKEN}"}) as r:
        assert r.status in (200, 404), (api, r.status)
