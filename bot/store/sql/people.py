"""One person's rows across every chat, for /forget (erase) and /export (gather)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from bot.core.console import PersonChat, PersonView
from bot.core.events import Erasure, UserData, UserKey
from bot.store import cols, tombstones
from bot.store.sql.conn import Conn, Dialect
from bot.store.sql.core import SQLCore

# The person's user messages on the platform (every bot, chat and session): $1 platform, $2 id.
_MINE = (
    "SELECT m.id FROM messages m JOIN conversations c ON c.id = m.conversation_id "
    "WHERE c.platform = $1 AND m.author_id = $2 AND m.role = 'user'"
)
# The persona's messages to them: replies to their messages, and the check-ins and reminders
# written to them (``messages.addressee``, docs/initiatives.md#privacy).
_REPLIES = (
    f"SELECT answered_by FROM messages WHERE id IN ({_MINE}) AND answered_by IS NOT NULL "
    "UNION SELECT m.id FROM messages m JOIN conversations c ON c.id = m.conversation_id "
    "WHERE c.platform = $1 AND m.addressee = $2"
)
# A reply is "only theirs" when no message of anyone else was answered by it.
_ONLY = (
    f"SELECT r.id FROM messages r WHERE r.id IN ({_REPLIES}) AND NOT EXISTS "
    "(SELECT 1 FROM messages o WHERE o.answered_by = r.id AND o.author_id <> $2)"
)
_SUMMARIES = (
    "SELECT sa.session_id FROM summary_authors sa JOIN sessions s ON s.id = sa.session_id "
    "JOIN conversations c ON c.id = s.conversation_id "
    "WHERE c.platform = $1 AND sa.author_id = $2"
)
# The conversations they wrote in, by their newest message there (through the index on
# ``author_id``, as their count is): $1 platform, $2 id, $3 how many.
_CHATS = (
    "SELECT c.id, c.bot, c.platform, c.chat_id, c.thread_id, MAX(m.created_at), COUNT(*) "
    "FROM messages m JOIN conversations c ON c.id = m.conversation_id "
    "WHERE c.platform = $1 AND m.author_id = $2 AND m.role = 'user' "
    "GROUP BY c.id, c.bot, c.platform, c.chat_id, c.thread_id "
    "ORDER BY MAX(m.created_at) DESC, c.id DESC LIMIT $3"
)
# Something of theirs is stored without a message: a memory record, a counted turn or a
# charge (each by its primary key or its (platform, user_id, at) index).
_KNOWN = (
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM user_memory WHERE platform = $1 AND user_id = $2) "
    "OR EXISTS (SELECT 1 FROM turn_usage WHERE platform = $1 AND user_id = $2) "
    "OR EXISTS (SELECT 1 FROM model_usage WHERE platform = $1 AND user_id = $2) "
    "THEN 1 ELSE 0 END"
)
_KEYED_MESSAGE = (
    f"SELECT c.bot, c.platform, c.chat_id, c.thread_id, {cols.MSG_COLS} FROM messages m "
    "JOIN sessions s ON s.id = m.session_id JOIN conversations c ON c.id = m.conversation_id "
)


class PeoplePart(SQLCore):
    """A person's rows across conversations: erasure and export."""

    async def erase_user_messages(self, user: UserKey) -> Erasure:
        d = self.dialect
        who = (user.platform, user.user_id)
        async with self._tx() as db:
            if d.for_update:
                # Lock every session that holds their messages or a summary of them, in id
                # order (no deadlock between two erasures): a summary save (which takes the
                # same lock) either committed before, and is dropped below, or runs after and
                # finds its sources gone. (SQLite: the write transaction serializes them.)
                await db.execute(
                    "SELECT id FROM sessions WHERE id IN (SELECT session_id FROM messages "
                    f"WHERE id IN ({_MINE}) UNION {_SUMMARIES}) ORDER BY id{d.for_update}",
                    *who,
                )
            mine = await _ids(db, _MINE + f" AND m.pending = {d.false}", who)
            pending = len(await _ids(db, _MINE + f" AND m.pending = {d.true}", who))
            replies = set(await _ids(db, _REPLIES, who))
            only = await _ids(db, _ONLY, who)
            shared = sorted(replies - set(only))
            sessions = set(await _ids(db, _SUMMARIES, who))
            # Sessions whose summary covers one of their messages, author list or not.
            sessions |= set(
                await _ids(
                    db,
                    "SELECT DISTINCT su.session_id FROM summaries su JOIN messages m "
                    f"ON m.session_id = su.session_id WHERE m.id IN ({_MINE}) "
                    "AND m.turn <= su.last_turn",
                    who,
                )
            )
            drop = sorted(sessions)
            # Tombstoned first: the gap check knows personabot removed these turns (/forget).
            buried = await db.fetch(
                "SELECT session_id, turn FROM messages "
                f"WHERE id IN ({_MINE} AND m.pending = {d.false}) OR id IN ({_ONLY})",
                *who,
            )
            await self._bury(
                db, ((int(r[0]), int(r[1])) for r in buried), tombstones.FORGET, time.time()
            )
            outbox = await db.execute(
                "DELETE FROM outbox WHERE reply_message_id"
                + d.any_of("$1")
                + " OR (reply_message_id"
                + d.any_of("$2")
                + " AND status <> 'pending')",
                d.list_arg(only),
                d.list_arg(shared),
            )
            removed_replies = await _delete(db, d, "messages", "id", only)
            # The message-age tombstones of those sessions said "folded into the summary";
            # it goes now, knowingly: they stay explained, with the reason (not a gap).
            if drop:
                await db.execute(
                    "UPDATE tombstones SET reason = $2 WHERE reason = $3 AND session_id"
                    + d.any_of("$1"),
                    d.list_arg(drop),
                    tombstones.SUMMARY_FORGOTTEN,
                    tombstones.MESSAGE_AGE,
                )
            summaries = await _delete(db, d, "summaries", "session_id", drop)
            await _delete(db, d, "summary_authors", "session_id", drop)
            messages = await _delete(db, d, "messages", "id", mine)
        return Erasure(
            messages=messages,
            replies=removed_replies,
            outbox=outbox,
            summaries=summaries,
            shared_replies=len(shared),
            pending=pending,
        )

    async def user_data(self, user: UserKey) -> UserData:
        """Everything stored about them, read from one snapshot."""
        who = (user.platform, user.user_id)
        async with self._snapshot() as db:
            record = await db.fetchval(
                "SELECT record FROM user_memory WHERE platform = $1 AND user_id = $2", *who
            )
            own = await db.fetch(_KEYED_MESSAGE + f"WHERE m.id IN ({_MINE}) ORDER BY m.id", *who)
            replies = await db.fetch(
                _KEYED_MESSAGE + f"WHERE m.id IN ({_REPLIES}) ORDER BY m.id", *who
            )
            summaries = await db.fetch(
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no, su.body, "
                "su.first_turn, su.last_turn, su.updated_at FROM summaries su "
                "JOIN sessions s ON s.id = su.session_id "
                "JOIN conversations c ON c.id = s.conversation_id "
                f"WHERE su.session_id IN ({_SUMMARIES}) ORDER BY su.session_id",
                *who,
            )
            outbox = await db.fetch(
                "SELECT o.id, c.bot, c.platform, c.chat_id, c.thread_id, s.session_no, "
                "o.reply_message_id, o.text, o.status, o.created_at, o.finished_at "
                "FROM outbox o JOIN sessions s ON s.id = o.session_id "
                "JOIN conversations c ON c.id = o.conversation_id "
                f"WHERE o.reply_message_id IN ({_REPLIES}) ORDER BY o.id",
                *who,
            )
            usage = await db.fetch(
                "SELECT bot, at FROM turn_usage WHERE platform = $1 AND user_id = $2 ORDER BY at",
                *who,
            )
            charges = await db.fetch(
                "SELECT at, bot, purpose, model, input_tokens, output_tokens, "
                "cache_write_tokens, cache_read_tokens FROM model_usage "
                "WHERE platform = $1 AND user_id = $2 ORDER BY at",
                *who,
            )
            personas = await db.fetch(
                "SELECT c.bot, c.platform, c.chat_id, c.thread_id, s.session_no, s.persona "
                "FROM sessions s JOIN conversations c ON c.id = s.conversation_id WHERE s.id IN "
                f"(SELECT session_id FROM messages WHERE id IN ({_MINE}) UNION "
                f"SELECT session_id FROM messages WHERE id IN ({_REPLIES})) "
                "ORDER BY s.id",
                *who,
            )
            media = await self._media_for(db, [*own, *replies], offset=4)
        return cols.user_data(
            user, record, own, replies, summaries, outbox, usage, charges, media, personas
        )

    async def console_person(
        self, user: UserKey, sources: Sequence[int], names: int = 20, chats: int = 20
    ) -> PersonView:
        """Their count, newest names, newest conversations, the source messages asked for
        and whether they are known, from one snapshot."""
        who = (user.platform, user.user_id)
        d = self.dialect
        async with self._snapshot() as db:
            count = await db.fetchval(f"SELECT COUNT(*) FROM ({_MINE}) mine", *who)
            called = await db.fetch(
                "SELECT m.display_name FROM messages m JOIN conversations c "
                "ON c.id = m.conversation_id WHERE c.platform = $1 AND m.author_id = $2 "
                "AND m.role = 'user' GROUP BY m.display_name ORDER BY MAX(m.id) DESC LIMIT $3",
                *who,
                names,
            )
            rows = await db.fetch(
                _KEYED_MESSAGE + f"WHERE m.id IN ({_MINE}) AND m.id" + d.any_of("$3"),
                *who,
                d.list_arg(sorted(set(sources))),
            )
            media = await self._media_for(db, rows, offset=4)
            # One more than asked says whether there are more.
            where = await db.fetch(_CHATS, *who, chats + 1)
            known = bool(count) or bool(await db.fetchval(_KNOWN, *who))
        said = cols.user_data(user, None, rows, (), (), (), (), media=media).messages
        listed = [
            PersonChat(
                id=int(r[0]),
                key=cols.conversation_key(r[1], r[2], r[3], r[4]),
                last_at=float(r[5]),
                messages=int(r[6]),
            )
            for r in where
        ]
        return PersonView(
            messages=int(count or 0),
            names=tuple(sorted(str(r[0]) for r in called)),
            sources={m.id: m for m in said},
            chats=tuple(listed[:chats]),
            more_chats=len(listed) > chats,
            known=known,
        )


async def _ids(db: Conn, sql: str, who: tuple[str, str]) -> list[int]:
    return [int(r[0]) for r in await db.fetch(sql, *who)]


async def _delete(db: Conn, d: Dialect, table: str, column: str, ids: list[int]) -> int:
    if not ids:
        return 0
    return await db.execute(f"DELETE FROM {table} WHERE {column}" + d.any_of("$1"), d.list_arg(ids))
