"""Review 22: the login's redirect and its rate limit, attacked."""

from __future__ import annotations

import asyncio

import pytest

from tests.web.security.rig import TOKEN, Rig


@pytest.mark.parametrize(
    "target", ["/\t/evil.example/", "/\n/evil.example", "/\r/evil.example", "/ /evil.example"]
)
async def test_a_login_link_cannot_send_the_operator_to_another_site(rig: Rig, target: str) -> None:
    # Browsers (and yarl) drop tabs and newlines from a URL: "/\t/evil" is "//evil", a
    # protocol-relative address of another host.
    async with rig.http.post(
        f"{rig.base}/login", data={"token": TOKEN, "next": target}, allow_redirects=False
    ) as r:
        assert r.status == 303
        location = r.headers["Location"]
    assert location.startswith("/") and not location.startswith("//"), location


async def test_slow_login_bodies_do_not_get_more_guesses_than_the_limit(rig: Rig) -> None:
    # Twelve connections send a wrong token's headers at once and their bodies later: each
    # request passed the limiter before any failure was counted (5 a minute allowed).
    host, port = rig.base.removeprefix("http://").split(":")
    body = b"token=wrong"
    head = (
        "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    connections = []
    for _ in range(12):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(head)
        await writer.drain()
        connections.append((reader, writer))
    # Whatever the server has read by now, the limit must hold: on main, requests whose
    # headers were in before the bodies each passed the limiter before any failure counted.
    statuses = []
    for _, writer in connections:
        writer.write(body)
        await writer.drain()
    for reader, writer in connections:
        statuses.append(int((await reader.readline()).split()[1]))
        writer.close()
    assert statuses.count(401) <= 5, statuses
    assert statuses.count(429) >= 7, statuses
