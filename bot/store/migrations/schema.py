"""The schema's versions, written once for both backends (append new ones; never edit one
that was applied). Only the column types and boolean spellings differ: each ``{name}`` is
filled from a backend's ``ColumnTypes`` (``migrations/sqlite.py``, ``migrations/postgres.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class ColumnTypes:
    """How a backend spells what the two schemas write differently."""

    serial: str  # an auto-assigned integer id (with PRIMARY KEY)
    bigint: str  # ids and counters
    real: str  # epoch seconds
    boolean: str
    true: str
    false: str
    is_pending: str  # the partial index's condition: messages waiting for a reply
    not_private: str
    not_pending: str
    blank_text: str  # ``text`` holds only spaces, tabs and line breaks
    blob: str  # bytes (a cached media file)
    #: What runs when a timer is armed or moved: PostgreSQL notifies the other processes
    #: (docs/scaling.md#wake-ups); SQLite has one process, woken in-process.
    timer_armed_trigger: str = ""
    #: Version 17's: PostgreSQL's trigger also names the conversation (the cut-off,
    #: docs/architecture.md#queue rule 9); SQLite: nothing.
    input_announced_trigger: str = ""


def render(types: ColumnTypes) -> tuple[tuple[int, str], ...]:
    """The versions in one backend's SQL."""
    values = asdict(types)
    return tuple((version, script.format(**values)) for version, script in TEMPLATES)


TEMPLATES: Final[tuple[tuple[int, str], ...]] = (
    (
        1,
        """
        CREATE TABLE conversations (
            id          {serial} PRIMARY KEY,
            bot         TEXT NOT NULL,
            platform    TEXT NOT NULL,
            chat_id     TEXT NOT NULL,
            thread_id   TEXT NOT NULL DEFAULT '',  -- '' = no thread (NULLs are never equal)
            version     {bigint} NOT NULL DEFAULT 0,
            created_at  {real} NOT NULL,
            -- 'inactive' when the platform refuses delivery (e.g. the user blocked the bot);
            -- the next inbound message makes it active again.
            status      TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'inactive')),
            status_reason TEXT,
            UNIQUE (bot, platform, chat_id, thread_id)
        );

        CREATE TABLE sessions (
            id               {serial} PRIMARY KEY,
            conversation_id  {bigint} NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            session_no       INTEGER NOT NULL,
            -- 'expired': closed and its messages deleted by retention (the row stays, so
            -- session numbers are never reused)
            status           TEXT NOT NULL CHECK (status IN ('open', 'closed', 'expired')),
            opened_at        {real} NOT NULL,
            last_activity_at {real} NOT NULL,
            closed_at        {real},
            close_reason     TEXT,
            next_turn        INTEGER NOT NULL DEFAULT 1,
            last_user_turn   INTEGER NOT NULL DEFAULT 0,
            extracted_turn   INTEGER NOT NULL DEFAULT 0,  -- user memory learned up to here
            UNIQUE (conversation_id, session_no)
        );
        CREATE INDEX sessions_to_extract ON sessions(last_activity_at)
            WHERE extracted_turn < last_user_turn;
        -- At most one open session per conversation, enforced by the database.
        CREATE UNIQUE INDEX sessions_one_open ON sessions(conversation_id) WHERE status = 'open';

        CREATE TABLE messages (
            id                  {serial} PRIMARY KEY,
            conversation_id     {bigint} NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            session_id          {bigint} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            turn                INTEGER NOT NULL,
            role                TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            author_id           TEXT NOT NULL,
            display_name        TEXT NOT NULL,
            text                TEXT NOT NULL,
            platform_message_id TEXT,
            is_private          {boolean} NOT NULL DEFAULT {true},
            version             {bigint} NOT NULL DEFAULT 0,
            pending             {boolean} NOT NULL DEFAULT {false},
            answered_by         {bigint},
            created_at          {real} NOT NULL,
            -- usage of the model call that produced an assistant message
            model               TEXT,
            input_tokens        INTEGER,
            output_tokens       INTEGER,
            cache_write_tokens  INTEGER,
            cache_read_tokens   INTEGER,
            UNIQUE (session_id, turn)
        );
        CREATE UNIQUE INDEX messages_platform_id
            ON messages(conversation_id, platform_message_id)
            WHERE platform_message_id IS NOT NULL;
        CREATE INDEX messages_pending ON messages(conversation_id, session_id) WHERE {is_pending};
        CREATE INDEX messages_created ON messages(created_at);
        CREATE INDEX messages_author ON messages(author_id);

        -- One row per person per model turn: per-user limits count these (across processes).
        CREATE TABLE turn_usage (
            id          {serial} PRIMARY KEY,
            bot         TEXT NOT NULL,
            platform    TEXT NOT NULL,
            user_id     TEXT NOT NULL,
            at          {real} NOT NULL
        );
        CREATE INDEX turn_usage_user ON turn_usage(platform, user_id, at);

        -- What retention deleted: counts and turn ranges, never content.
        CREATE TABLE retention_log (
            id              {serial} PRIMARY KEY,
            at              {real} NOT NULL,
            conversation_id {bigint} NOT NULL,
            session_no      INTEGER NOT NULL,
            first_turn      INTEGER NOT NULL,
            last_turn       INTEGER NOT NULL,
            messages        INTEGER NOT NULL,
            reason          TEXT NOT NULL
        );

        CREATE TABLE session_state (
            session_id  {bigint} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            key         TEXT NOT NULL,
            value       TEXT NOT NULL,
            updated_at  {real} NOT NULL,
            PRIMARY KEY (session_id, key)
        );

        CREATE TABLE user_memory (
            platform    TEXT NOT NULL,
            user_id     TEXT NOT NULL,
            record      TEXT NOT NULL,
            updated_at  {real} NOT NULL,
            PRIMARY KEY (platform, user_id)
        );

        CREATE TABLE summaries (
            session_id  {bigint} PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            body        TEXT NOT NULL,
            first_turn  INTEGER NOT NULL,
            last_turn   INTEGER NOT NULL,
            updated_at  {real} NOT NULL
        );

        -- Timers live apart from conversation data (docs/architecture.md#queue rule 2): nothing
        -- that writes
        -- conversations, messages or memory touches this table.
        CREATE TABLE timers (
            conversation_id  {bigint} PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
            due_at           {real} NOT NULL,
            first_pending_at {real} NOT NULL,
            armed_version    {bigint} NOT NULL
        );
        CREATE INDEX timers_due ON timers(due_at);

        CREATE TABLE leases (
            name        TEXT PRIMARY KEY,
            holder      TEXT NOT NULL,
            token       {bigint} NOT NULL,
            expires_at  {real} NOT NULL
        );

        CREATE TABLE outbox (
            id                  {serial} PRIMARY KEY,
            conversation_id     {bigint} NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            session_id          {bigint} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            reply_message_id    {bigint} NOT NULL,
            text                TEXT NOT NULL,
            reply_to            TEXT,
            status              TEXT NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'sent', 'failed')),
            attempts            INTEGER NOT NULL DEFAULT 0,
            created_at          {real} NOT NULL,
            attempted_at        {real},
            finished_at         {real},
            failure             TEXT
        );
        CREATE INDEX outbox_pending ON outbox(status, attempts) WHERE status = 'pending';
        CREATE INDEX outbox_session ON outbox(session_id);
        CREATE INDEX outbox_finished ON outbox(finished_at) WHERE status != 'pending';
        """,
    ),
    (
        2,
        """
        -- User memory is written by compare-and-swap on this version (0 = no record yet):
        -- /forget bumps it unconditionally, so nothing read before it can be written back.
        ALTER TABLE user_memory ADD COLUMN version {bigint} NOT NULL DEFAULT 0;
        UPDATE user_memory SET version = 1;

        -- Whether a user message addressed the bot (private chat, mention, reply, command
        -- trigger). Memory is learned only from addressed messages. Older rows: a group
        -- message that was neither pending nor answered was stored as context only.
        ALTER TABLE messages ADD COLUMN addressed {boolean} NOT NULL DEFAULT {true};
        UPDATE messages SET addressed = {false} WHERE role = 'user' AND {not_private}
            AND {not_pending} AND answered_by IS NULL;

        -- Whose messages were folded into a session's summary (for /forget and /export).
        CREATE TABLE summary_authors (
            session_id  {bigint} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            author_id   TEXT NOT NULL,
            PRIMARY KEY (session_id, author_id)
        );
        CREATE INDEX summary_authors_author ON summary_authors(author_id);
        -- /forget and /export find the replies to a person's messages and their outbox rows.
        CREATE INDEX messages_answered_by ON messages(answered_by) WHERE answered_by IS NOT NULL;
        CREATE INDEX outbox_reply ON outbox(reply_message_id);
        -- Older summaries: everyone with a stored message in the session (best effort).
        INSERT INTO summary_authors (session_id, author_id)
            SELECT DISTINCT su.session_id, m.author_id FROM summaries su
            JOIN messages m ON m.session_id = su.session_id AND m.role = 'user';
        """,
    ),
    (
        3,
        """
        -- Turns that personabot itself deleted (a platform deletion, /forget, retention by
        -- message age): the gap check counts them as explained; any other hole in a
        -- session's turns 1..next_turn-1 is reported by the gap policy. Ranges, inclusive.
        CREATE TABLE tombstones (
            session_id  {bigint} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            first_turn  INTEGER NOT NULL,
            last_turn   INTEGER NOT NULL,
            reason      TEXT NOT NULL,
            at          {real} NOT NULL
        );
        CREATE INDEX tombstones_session ON tombstones(session_id, last_turn);
        """,
    ),
    (
        4,
        """
        -- Why a user message was handled without a reply of its own (NULL: answered, or
        -- pending): 'limited', 'rejected: <reason>', 'session closed by /new', ...
        ALTER TABLE messages ADD COLUMN closed_reason TEXT;

        -- Every model call's usage (replies and memory tasks), one row per person it is
        -- charged to (user_id NULL: charged to the bot only). Limits and /stats read this.
        CREATE TABLE model_usage (
            id                  {serial} PRIMARY KEY,
            at                  {real} NOT NULL,
            bot                 TEXT NOT NULL,
            platform            TEXT NOT NULL,
            user_id             TEXT,
            purpose             TEXT NOT NULL,
            model               TEXT,
            input_tokens        {bigint} NOT NULL DEFAULT 0,
            output_tokens       {bigint} NOT NULL DEFAULT 0,
            cache_write_tokens  {bigint} NOT NULL DEFAULT 0,
            cache_read_tokens   {bigint} NOT NULL DEFAULT 0
        );
        CREATE INDEX model_usage_bot ON model_usage(bot, at);
        CREATE INDEX model_usage_user ON model_usage(platform, user_id, at);

        -- Replies recorded before this version kept their usage on the message row only.
        INSERT INTO model_usage (at, bot, platform, user_id, purpose, model, input_tokens,
            output_tokens, cache_write_tokens, cache_read_tokens)
        SELECT m.created_at, c.bot, c.platform, NULL, 'reply', m.model,
            COALESCE(m.input_tokens, 0), COALESCE(m.output_tokens, 0),
            COALESCE(m.cache_write_tokens, 0), COALESCE(m.cache_read_tokens, 0)
        FROM messages m JOIN conversations c ON c.id = m.conversation_id
        WHERE m.role = 'assistant';

        -- An empty assistant message makes every later request of its session fail (the
        -- API refuses empty text blocks): repair the ones older versions recorded.
        UPDATE messages SET text = '(no reply)'
            WHERE role = 'assistant' AND {blank_text};
        UPDATE outbox SET text = '(no reply)' WHERE {blank_text};
        """,
    ),
    (
        5,
        """
        -- Media of a message (photos, stickers, voice notes: bot/core/media.py), in order:
        -- the platform's reference, what the turn made of it (status, the prepared bytes'
        -- type and size, a transcript or why it failed) and the cached bytes themselves,
        -- which go with their message (retention, /forget, a platform deletion).
        CREATE TABLE media (
            id              {serial} PRIMARY KEY,
            message_id      {bigint} NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            position        INTEGER NOT NULL,
            kind            TEXT NOT NULL,
            label           TEXT NOT NULL,
            ref             TEXT NOT NULL DEFAULT '',
            unique_id       TEXT NOT NULL DEFAULT '',
            media_type      TEXT NOT NULL DEFAULT '',
            size            {bigint},
            width           {bigint},
            height          {bigint},
            duration        {real},
            status          TEXT NOT NULL DEFAULT 'new'
                            CHECK (status IN ('new', 'ready', 'failed', 'skipped')),
            prepared_type   TEXT NOT NULL DEFAULT '',
            prepared_width  {bigint},
            prepared_height {bigint},
            note            TEXT NOT NULL DEFAULT '',
            data            {blob},
            updated_at      {real} NOT NULL
        );
        -- Reads by message (one query per batch of messages) and the cascade.
        CREATE UNIQUE INDEX media_message ON media(message_id, position);

        -- The message this one replies to, quotes or forwards (JSON; NULL: none), and how
        -- many media rows it has (0: a read never looks for them).
        ALTER TABLE messages ADD COLUMN quote TEXT;
        ALTER TABLE messages ADD COLUMN media_count INTEGER NOT NULL DEFAULT 0;
        """,
    ),
    (
        6,
        """
        -- The persona writes first (docs/initiatives.md). Like timers, apart from conversation
        -- data: one row per conversation that may get check-ins, with when the next one is
        -- due (NULL: not armed), whether the chat allows them (/checkins) and the last
        -- decision ('sent', 'skipped: <the model's reason>', 'not now: <why>').
        CREATE TABLE initiatives (
            conversation_id {bigint} PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
            due_at          {real},
            enabled         {boolean} NOT NULL DEFAULT {true},
            sent_at         {real},
            decided_at      {real},
            decision        TEXT,
            updated_at      {real} NOT NULL
        );
        CREATE INDEX initiatives_due ON initiatives(due_at) WHERE due_at IS NOT NULL;

        -- Reminders people asked for (the remind_me tool): tied to the conversation, not the
        -- session, so they outlive the retention of the session that set them.
        CREATE TABLE reminders (
            id              {serial} PRIMARY KEY,
            conversation_id {bigint} NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            user_id         TEXT NOT NULL,
            about           TEXT NOT NULL,
            due_at          {real} NOT NULL,
            timezone        TEXT NOT NULL,
            status          TEXT NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'sent', 'cancelled', 'failed')),
            created_at      {real} NOT NULL,
            finished_at     {real},
            note            TEXT,
            message_id      {bigint}
        );
        CREATE INDEX reminders_due ON reminders(due_at) WHERE status = 'pending';
        CREATE INDEX reminders_user ON reminders(user_id, status);

        -- A person's own settings (/timezone), per platform.
        CREATE TABLE person_settings (
            platform    TEXT NOT NULL,
            user_id     TEXT NOT NULL,
            timezone    TEXT,
            updated_at  {real} NOT NULL,
            PRIMARY KEY (platform, user_id)
        );

        -- What wrote an assistant message when no person's message asked for it (NULL: a
        -- reply): 'initiative' (a check-in) or 'reminder'.
        ALTER TABLE messages ADD COLUMN origin TEXT;
        """,
    ),
    (
        7,
        """
        -- Whom a message the persona wrote first was written to (the person a check-in or a
        -- reminder is for; NULL: a reply, whose people are the messages it answered). /export
        -- shows it to them and /forget deletes it with their replies (docs/privacy.md).
        ALTER TABLE messages ADD COLUMN addressee TEXT;
        """,
    ),
    (
        8,
        """
        -- The persona of a session (docs/personas.md#several-personas; NULL: the bot's
        -- default). A chat's persona is its newest session's: a new session inherits it, and
        -- /persona opens a new session with another, so no persona reads another's window.
        ALTER TABLE sessions ADD COLUMN persona TEXT;
        """,
    ),
    (
        10,
        """
        -- The operator console (docs/web.md): every view of a person's memory and every action
        -- taken there, who and when; and the conversation list, newest activity first, one
        -- keyset page at a time.
        CREATE TABLE operator_audit (
            id      {serial} PRIMARY KEY,
            at      {real} NOT NULL,
            actor   TEXT NOT NULL,
            action  TEXT NOT NULL,
            target  TEXT NOT NULL,
            detail  TEXT NOT NULL DEFAULT ''
        );
        CREATE INDEX sessions_activity ON sessions(last_activity_at, id);
        CREATE INDEX model_usage_at ON model_usage(at);
        """,
    ),
    (
        11,
        """
        -- /export, /forget and the console's person page find the check-ins and reminders
        -- written to a person by this column (migration 7): without an index each of them
        -- read every message of the database. Few messages have one: a partial index.
        CREATE INDEX messages_addressee ON messages(addressee) WHERE addressee IS NOT NULL;
        """,
    ),
    (
        12,
        """
        -- When a person last edited a message (NULL: never); the console marks edited lines.
        ALTER TABLE messages ADD COLUMN edited_at {real};
        """,
    ),
    (
        13,
        """
        -- PostgreSQL: an armed or moved timer is announced to every process on the channel
        -- personabot_timers, so another process can start the turn without waiting for its
        -- scan (docs/scaling.md#wake-ups). SQLite: nothing (one process wakes itself).
        {timer_armed_trigger}
        -- Every conversation has its turn lease row (free: token 0, expired): PostgreSQL's
        -- claim of due turns locks lease rows (docs/scaling.md#claims); new conversations get
        -- theirs when they are created.
        INSERT INTO leases (name, holder, token, expires_at)
        SELECT 'turn:' || c.bot || ':' || c.platform || ':' || c.chat_id ||
               CASE WHEN c.thread_id = '' THEN '' ELSE '/' || c.thread_id END, '', 0, 0
        FROM conversations c WHERE true
        ON CONFLICT (name) DO NOTHING;
        """,
    ),
    (
        14,
        """
        -- The console's overview (docs/web.md) reads recent trouble and per-person spend by
        -- these, newest first, without reading every row: turns the model rejected (their
        -- messages' closed_reason, migration 4), sessions found with turns missing (the
        -- session value bot.core.console.GAP_NOTICED_KEY names), and today's turns of each
        -- person (the per-person turn limits count turn_usage).
        CREATE INDEX messages_rejected ON messages(created_at)
            WHERE closed_reason LIKE 'rejected:%';
        CREATE INDEX session_state_gaps ON session_state(updated_at)
            WHERE key = 'personabot:gap_noticed';
        CREATE INDEX turn_usage_at ON turn_usage(at);
        """,
    ),
    (
        15,
        """
        -- The per-bot cap on check-ins ([schedule] max_checkins_per_day) counts a bot's
        -- check-ins of the last 24 hours before each one: only check-ins are indexed, so the
        -- count never reads the day's other messages.
        CREATE INDEX messages_checkins ON messages(created_at) WHERE origin = 'initiative';
        """,
    ),
    (
        16,
        """
        -- A 'message age' tombstone now counts only inside the range of the summary stored
        -- now (docs/architecture.md#retention rule 3). Before this version /forget dropped
        -- summaries without re-tagging their tombstones, and retention could bury turns below
        -- the summary's first turn: personabot's own deletions, which nothing tells apart from
        -- a summary lost behind its back. They stay explained, under a reason that says so,
        -- rather than becoming gap notices (or refusals) on upgrade.
        UPDATE tombstones SET reason = 'message age (no summary covered it at upgrade)'
        WHERE reason = 'message age' AND NOT EXISTS (
            SELECT 1 FROM summaries su WHERE su.session_id = tombstones.session_id
            AND su.first_turn <= tombstones.first_turn
            AND tombstones.last_turn <= su.last_turn
        );
        """,
    ),
    (
        17,
        """
        -- PostgreSQL: an armed or moved timer (new input, an edit of a pending message) also
        -- names its conversation on the channel personabot_input, so that another process's
        -- running generation of that conversation checks whether it went stale and stops
        -- (docs/architecture.md#queue rule 9). The timers channel keeps its payload: a process
        -- of the previous version goes on reading it during a rolling upgrade.
        -- SQLite: nothing (one process signals its generations in-process).
        {input_announced_trigger}
        """,
    ),
    (
        18,
        """
        -- What each model call's share cost in dollars when it was charged (the price table
        -- of [llm.prices] at that moment; NULL: the model had no price): money limits, /stats
        -- and the console sum it, and a later price change never rewrites what was spent.
        ALTER TABLE model_usage ADD COLUMN cost {real};
        """,
    ),
    (
        19,
        """
        -- Each call of an effectful outside tool (an MCP server's), recorded before it is made
        -- and closed with its result, so that it is never made twice: a retry of the same turn
        -- (the same first pending message) after a crash or a takeover finds it and gives the
        -- model the recorded result, or says its outcome is unknown (docs/tools.md). The
        -- arguments are kept as a digest only; the result goes with the turn's messages.
        CREATE TABLE tool_calls (
            id               {serial} PRIMARY KEY,
            conversation_id  {bigint} NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            first_message_id {bigint} NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            call_key         TEXT NOT NULL,
            tool             TEXT NOT NULL,
            status           TEXT NOT NULL CHECK (status IN ('started', 'done', 'failed')),
            result           TEXT,
            created_at       {real} NOT NULL,
            finished_at      {real},
            UNIQUE (conversation_id, first_message_id, call_key)
        );
        CREATE INDEX tool_calls_message ON tool_calls(first_message_id);
        """,
    ),
    (
        20,
        """
        -- Scenes (docs/scenes.md): the persona that wrote an assistant message (NULL: the
        -- session's persona, as before scenes). The cast shares one transcript; each line
        -- carries its speaker, and the hourly cap counts a scene's lines by time.
        ALTER TABLE messages ADD COLUMN persona TEXT;
        CREATE INDEX messages_scene_lines ON messages(conversation_id, created_at)
            WHERE persona IS NOT NULL;
        """,
    ),
    (
        21,
        """
        -- A scene's state, per conversation (not per session: /new must not end an admin's
        -- /stop or reset the breaker): when its mute ends, the caps it hit within the last
        -- hour (JSON list of times), and its last plan, who spoke and why (JSON, for the
        -- console). Persona ids and times only: nothing about a person.
        CREATE TABLE scene_state (
            conversation_id {bigint} PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
            muted_until     {real},
            caps            TEXT NOT NULL DEFAULT '[]',
            last_plan       TEXT,
            updated_at      {real} NOT NULL
        );
        """,
    ),
    (
        22,
        """
        -- The commands a bot registered on its platform itself (Discord application commands,
        -- docs/discord.md#sync), by scope ('global' or 'guild:<id>'): a sync deletes only a
        -- command recorded here that the bot no longer has, never one it did not create.
        -- Names and platform ids only: nothing about a person.
        CREATE TABLE platform_commands (
            bot        TEXT NOT NULL,
            scope      TEXT NOT NULL,
            name       TEXT NOT NULL,
            command_id TEXT NOT NULL,
            PRIMARY KEY (bot, scope, name)
        );
        """,
    ),
    (
        23,
        """
        -- A command answer's choices (docs/telegram.md#buttons): JSON of the person they are
        -- for and each choice's label and command, so a row re-sent by recovery after a crash
        -- still has its buttons. Cleared with the text once the row is sent or given up.
        ALTER TABLE outbox ADD COLUMN choices TEXT;
        """,
    ),
)
