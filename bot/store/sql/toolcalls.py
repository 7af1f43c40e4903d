"""The ledger of effectful outside tools' calls (migration 19, docs/tools.md#effectful-tools):
a call is recorded before it is made, in its own transaction, so that a retry of the turn (a
crash, a takeover, a regeneration) finds it and never makes it again."""

from __future__ import annotations

from typing import Literal

from bot.core.errors import StoreError
from bot.core.events import ConversationKey, ToolCallRecord
from bot.store.sql.core import CONV_WHERE, CONV_WHERE_C, SQLCore, conv_args


class ToolCallsPart(SQLCore):
    """begin_tool_call, finish_tool_call, tool_calls_of."""

    async def begin_tool_call(
        self,
        conversation: ConversationKey,
        first_message_id: int,
        call_key: str,
        tool: str,
        now: float,
    ) -> tuple[bool, ToolCallRecord]:
        """INSERT ... ON CONFLICT DO NOTHING: the unique key decides between two processes
        that reach the same call at once; the loser reads the winner's record."""
        async with self._tx() as db:
            new = await db.fetchval(
                "INSERT INTO tool_calls (conversation_id, first_message_id, call_key, tool, "
                f"status, created_at) SELECT id, $5, $6, $7, 'started', $8 FROM conversations "
                f"WHERE {CONV_WHERE} ON CONFLICT (conversation_id, first_message_id, call_key) "
                "DO NOTHING RETURNING id",
                *conv_args(conversation),
                first_message_id,
                call_key,
                tool,
                now,
            )
            if new is not None:
                return True, ToolCallRecord(int(new), "started", None, tool, call_key)
            row = await db.fetchrow(
                "SELECT t.id, t.status, t.result FROM tool_calls t JOIN conversations c "
                f"ON c.id = t.conversation_id WHERE {CONV_WHERE_C} "
                "AND t.first_message_id = $5 AND t.call_key = $6",
                *conv_args(conversation),
                first_message_id,
                call_key,
            )
        if row is None:
            raise StoreError(f"{conversation}: no conversation to record a tool call in")
        status: Literal["started", "done", "failed"] = row[1]
        result = None if row[2] is None else str(row[2])
        return False, ToolCallRecord(int(row[0]), status, result, tool, call_key)

    async def finish_tool_call(
        self, record_id: int, status: Literal["done", "failed"], result: str, now: float
    ) -> None:
        async with self._write() as db:
            await db.execute(
                "UPDATE tool_calls SET status = $2, result = $3, finished_at = $4 WHERE id = $1",
                record_id,
                status,
                result,
                now,
            )

    async def tool_calls_of(
        self, conversation: ConversationKey, first_message_id: int
    ) -> list[ToolCallRecord]:
        async with self._read() as db:
            rows = await db.fetch(
                "SELECT t.id, t.status, t.result, t.tool, t.call_key FROM tool_calls t "
                f"JOIN conversations c ON c.id = t.conversation_id WHERE {CONV_WHERE_C} "
                "AND t.first_message_id = $5 ORDER BY t.id",
                *conv_args(conversation),
                first_message_id,
            )
        return [
            ToolCallRecord(
                int(r[0]), r[1], None if r[2] is None else str(r[2]), str(r[3]), str(r[4])
            )
            for r in rows
        ]
