"""Versioned schema of the PostgreSQL store (bot/store/migrations/schema.py in PostgreSQL
types: BIGSERIAL/BIGINT ids, DOUBLE PRECISION for epoch seconds, BOOLEAN flags). Each version
is applied in one transaction under an advisory lock (see ``PostgresStore``).
"""

from __future__ import annotations

from typing import Final

from bot.store.migrations.schema import ColumnTypes, render

# Key of the transaction-level advisory lock taken while migrating, so that several processes
# starting together migrate once ("personabot" as a number; any stable 64-bit value would do).
MIGRATION_LOCK: Final = 0x70657273_6F6E6162

#: The channel on which every armed or moved timer is announced, with "<bot> <due_at>" as the
#: payload (delivered at commit; bot/store/postgres/_wakeups.py listens).
TIMERS_CHANNEL: Final = "personabot_timers"

# A trigger rather than a NOTIFY beside each statement that arms a timer: every path (ingest,
# edits, re-arms after a model error, the final check's re-arm, another tool's writes) is
# covered, and PostgreSQL folds identical notifications of one transaction into one.
TIMER_ARMED_TRIGGER: Final = f"""
        CREATE FUNCTION personabot_timer_armed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{TIMERS_CHANNEL}', (SELECT bot FROM conversations
                WHERE id = NEW.conversation_id) || ' ' || NEW.due_at::text);
            RETURN NULL;
        END $$;
        CREATE TRIGGER timers_armed AFTER INSERT OR UPDATE OF due_at ON timers
            FOR EACH ROW EXECUTE FUNCTION personabot_timer_armed();
"""

#: The channel on which the conversation of every armed or moved timer is named, as a JSON
#: array [bot, platform, chat_id, thread_id] ('' = no thread): a process with a generation of
#: that conversation running checks whether newer input made it stale (the cut-off).
INPUT_CHANNEL: Final = "personabot_input"

# Migration 17 replaces the function of migration 13's trigger (the trigger stays): the same
# announcement on the timers channel, and the conversation on the input channel.
INPUT_ANNOUNCED_TRIGGER: Final = f"""
        CREATE OR REPLACE FUNCTION personabot_timer_armed() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            c conversations%ROWTYPE;
        BEGIN
            SELECT * INTO c FROM conversations WHERE id = NEW.conversation_id;
            PERFORM pg_notify('{TIMERS_CHANNEL}', c.bot || ' ' || NEW.due_at::text);
            PERFORM pg_notify('{INPUT_CHANNEL}',
                json_build_array(c.bot, c.platform, c.chat_id, c.thread_id)::text);
            RETURN NULL;
        END $$;
"""

TYPES: Final = ColumnTypes(
    serial="BIGSERIAL",
    bigint="BIGINT",
    real="DOUBLE PRECISION",
    boolean="BOOLEAN",
    true="TRUE",
    false="FALSE",
    is_pending="pending",
    not_private="NOT is_private",
    not_pending="NOT pending",
    blank_text="btrim(text, E' \\t\\n\\r') = ''",
    blob="BYTEA",
    timer_armed_trigger=TIMER_ARMED_TRIGGER,
    input_announced_trigger=INPUT_ANNOUNCED_TRIGGER,
)

MIGRATIONS: Final[tuple[tuple[int, str], ...]] = render(TYPES)
