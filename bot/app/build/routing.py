"""What answers an inbound event: the router, the chat commands and the exports they send."""

from __future__ import annotations

from bot.app.build.parts import Parts
from bot.app.build.policies import greeting_of, prices
from bot.app.build.turns import Agenda
from bot.core.events import Inbound, SessionInfo
from bot.core.tasks import Background
from bot.queue import Ingestor
from bot.runtime.commands import Commands, export_document
from bot.runtime.delivery import Delivery
from bot.runtime.exports import ExportPolicy, Exports
from bot.runtime.extensions import Extensions
from bot.runtime.pipeline import Pipeline
from bot.runtime.reminders import AgendaCommands
from bot.runtime.router import Router
from bot.runtime.stats import usage_report
from memory.service import Memory


def build_exports(parts: Parts, memory: Memory, holder: str | None) -> Exports:
    """``/export``: one JSON document per person, sent privately (bot/runtime/exports.py)."""
    defaults, outlets = parts.hosted.defaults, parts.hosted.outlets
    return Exports(
        store=parts.store,
        clock=parts.turn_clock,
        outlet_for=outlets.get,
        build=lambda user, conversation: export_document(memory, user, conversation, defaults),
        policy=ExportPolicy(every_seconds=parts.settings.limits.export_every_minutes * 60),
        holder=holder,
        languages=parts.hosted.languages,
        delivery=Delivery(
            store=parts.store,
            clock=parts.turn_clock,
            outlet_for=outlets.get,
            voice_of=parts.hosted.voice_of,
        ),
    )


def build_commands(
    parts: Parts,
    memory: Memory,
    exports: Exports,
    extensions: Extensions,
    agenda: Agenda | None,
) -> Commands:
    """The built-in chat commands, the plugins' and, with an agenda, /reminders and the rest."""
    store, clock, hosted = parts.store, parts.clock, parts.hosted
    price_list = prices(parts.settings)

    def greeting(session: SessionInfo, inbound: Inbound) -> str:
        profile = hosted.profile_of(session.key.conversation.bot, session.persona)
        return greeting_of(profile.pin, session.key, inbound)

    commands = Commands(
        store=store,
        clock=clock,
        greeting=greeting,
        personas=hosted.cast,
        scenes={
            key: profile.scene.mute_seconds
            for key, profile in hosted.profiles.items()
            if profile.scene is not None
        },
        scene_store=store,
        memory=memory,
        forget_deletes_messages=parts.settings.retention.forget_deletes_messages,
        is_admin=hosted.is_admin,
        usage_report=lambda bot: usage_report(store, clock, price_list, bot),
        exports=exports,
        extensions=extensions,
        plugin_timeout=parts.settings.tools.command_timeout_seconds,
        languages=hosted.languages,
    )
    if agenda is not None:
        proactive = agenda.proactive
        agenda_commands = AgendaCommands(
            store=store, clock=clock, proactive=proactive, languages=hosted.languages
        )
        checkins = any(proactive.checks_in(k) for k in hosted.profiles)
        for name, description, handler in agenda_commands.specs(checkins=checkins):
            commands.register(name, description, handler)
        commands.suggest_with("reminders", "id", agenda_commands.suggest_reminders)
    return commands


def build_router(
    parts: Parts,
    ingestor: Ingestor,
    memory: Memory,
    exports: Exports,
    pipeline: Pipeline,
    plugged: tuple[Extensions, Agenda | None],
    *,
    later: Background | None = None,
) -> Router:
    """Each inbound event: access check, middleware, commands at once, the rest ingested.
    ``plugged``: the plugins' extensions and the agenda, whose commands join the built-in."""
    extensions, agenda = plugged
    outlets = parts.hosted.outlets
    return Router(
        ingestor=ingestor,
        commands=build_commands(parts, memory, exports, extensions, agenda),
        outlets=outlets,
        store=parts.store,
        clock=parts.clock,
        access=parts.hosted.access,
        memory=memory,
        metrics=parts.metrics,
        extensions=extensions,
        middleware_timeout=parts.settings.tools.command_timeout_seconds,
        stops=pipeline.stops,
        later=later,
        scenes={
            key: profile.scene
            for key, profile in parts.hosted.profiles.items()
            if profile.scene is not None
        },
        delivery=Delivery(
            store=parts.store,
            clock=parts.clock,
            outlet_for=outlets.get,
            voice_of=parts.hosted.voice_of,
        ),
    )
