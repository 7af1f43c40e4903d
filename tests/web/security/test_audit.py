"""Review 22: every view of a person's memory is in the operator audit log."""

from __future__ import annotations

from bot.core.events import UserKey
from memory.records import MemoryItem, UserMemory
from tests.web.security.rig import DM, T0, TOKEN, Rig, answered


async def test_a_conversation_page_showing_a_persons_memory_is_audited(rig: Rig) -> None:
    source = await answered(rig.store, DM, "Ada", "hello there", T0)
    user = UserKey("telegram", "7")
    fact = MemoryItem("semantic", "home", "Lisbon-by-the-river", sources=(source,))
    await rig.store.set_user_memory(user, UserMemory(items=(fact,)).to_json(), T0)
    await rig.login()
    async with rig.http.get(f"{rig.base}/conversations/1") as r:
        assert "Lisbon-by-the-river" in await r.text()  # the prompt shows what is remembered
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with rig.http.get(f"{rig.base}/api/conversations/1", headers=bearer) as r:
        assert "Lisbon-by-the-river" in await r.text()
    entries = await rig.store.audit_log(limit=10)
    views = [(e.actor, e.action, e.target) for e in entries if e.action == "view conversation"]
    assert views == [
        ("api", "view conversation", "conversation 1"),
        ("operator", "view conversation", "conversation 1"),
    ]
