"""Chat commands: handled at once, never debounced and never sent to the model."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from bot.core.choices import TYPED_LINE, Answer, Choice
from bot.core.clock import Clock
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, Inbound, SessionInfo, UserKey, is_person
from bot.core.i18n import N_, Texts, Verbatim
from bot.core.markup import literal
from bot.core.menu import Suggestion
from bot.core.tasks import within
from bot.runtime.exports import Exports
from bot.runtime.extensions import Command, CommandSpec, Extensions, Handler
from bot.runtime.languages import Languages
from bot.store.contracts import SceneStore, SessionStore
from memory.records import EVERY_PERSONA
from memory.service import Memory

log = logging.getLogger("personabot.commands")

_COMMAND = re.compile(
    r"^/(?P<name>[A-Za-z][A-Za-z0-9_]{0,31})(?:@(?P<bot>\w+))?(?:\s+(?P<args>.*))?$", re.S
)


#: Invisible direction controls (marks, embeddings, isolates): a right-to-left answer wraps
#: each command it shows in isolates (bot/core/i18n.py ``finish``), and a person who copies
#: the command sends them back. A command never needs one.
_BIDI_CONTROLS = re.compile("[\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def parse_command(text: str) -> Command | None:
    """``/name[@bot] args`` -> Command; anything else -> None."""
    match = _COMMAND.match(_BIDI_CONTROLS.sub("", text).strip())
    if match is None:
        return None
    return Command(match["name"].lower(), (match["args"] or "").strip(), match["bot"])


#: Commands of personabot itself; a plugin cannot replace them (privacy and sessions).
BUILTIN_COMMANDS = frozenset(
    {
        "start",
        "new",
        "reset",
        "memory",
        "forget",
        "export",
        "help",
        "stats",
        "persona",
        "reminders",
        "timezone",
        "checkins",
    }
)

#: What a user sees when a plugin's command handler raised (the error is logged).
PLUGIN_FAILED = N_("Sorry, /{name} failed. Please try again later.")

#: Commands about one person's own data: a collective author (a group's anonymous admins, a
#: channel) is no one person, so none of them may read, export or erase what "they" said.
PERSONAL_COMMANDS = frozenset({"memory", "forget", "export"})

#: Commands listed only in private chats' menus (docs/telegram.md#menus): about one person's
#: data or settings, whose answers nobody else should read. Typed in a group they still work.
PRIVATE_MENU = PERSONAL_COMMANDS | {"start", "reminders", "timezone"}

#: Commands whose answers are for the asker's eyes only where a platform can show them so
#: (Discord's ephemeral answers to application commands, docs/discord.md#7-commands).
PRIVATE_COMMANDS = frozenset({"memory", "forget", "export", "stats", "reminders", "timezone"})


class Refusal(str):
    """An answer that refuses or reports an error (for the asker's eyes only where a platform
    can show it so); otherwise an ordinary ``str``."""

    __slots__ = ()


#: Offers values for one option of a command while the person types (``Commands.suggest``).
Suggester = Callable[[Inbound, str], Awaitable[tuple[Suggestion, ...]]]
#: At most this many suggestions (Discord shows 25).
SUGGESTIONS = 25

NOT_A_PERSON = N_(
    "/{name} is about one person's own data, and I cannot tell who wrote this (an anonymous "
    "admin or a channel): send it as yourself."
)

#: /forget's question (docs/privacy.md): nothing is erased before the asker confirms.
FORGET_ASK = N_(
    "Erase everything I remember about you, in every chat with me? This cannot be undone."
)
FORGET_ASK_MESSAGES = N_(
    "Erase everything I remember about you, and the messages you wrote to me with my replies "
    "to them, in every chat with me? This cannot be undone."
)
#: The words typed after /forget (the buttons' commands): never translated, like command names.
FORGET_CONFIRM: Final = frozenset({"confirm", "yes"})
FORGET_CANCEL: Final = frozenset({"cancel", "no"})

GROUP_MEMORY_NOTE = N_(
    "In a group I show only what may come up in this group. For everything I keep about "
    "you, send /memory in a private chat with me."
)


async def export_document(
    memory: Memory,
    user: UserKey,
    conversation: ConversationKey,
    personas: Mapping[str, str] | None = None,
) -> str:
    """Everything stored about a person on this platform (every chat and kind of row), as JSON
    text; ``conversation`` is where it was asked, which does not narrow it. ``personas``:
    each bot's default persona id."""
    return json.dumps(await memory.export_all(user, personas), ensure_ascii=False, indent=1)


@dataclass(frozen=True, slots=True)
class PersonaChoice:
    """A persona a bot may speak as (``/persona``)."""

    id: str
    name: str


def _typed_in(texts: Texts, choice: Choice) -> Choice:
    """``choice`` with its typed-command line in ``texts``' language (where no buttons show:
    bot/core/choices.py); as it was in English."""
    line = texts(TYPED_LINE).format(command=choice.command, label=choice.label)
    line = texts.finish(line)
    return choice if line == choice.typed() else replace(choice, line=line)


class Commands:
    """The chat commands of the bots of a process: built-in, then the plugins' (per bot)."""

    def __init__(
        self,
        *,
        store: SessionStore,
        clock: Clock,
        greeting: Callable[[SessionInfo, Inbound], str],
        memory: Memory | None = None,
        forget_deletes_messages: bool = False,
        is_admin: Callable[[str, str], bool] | None = None,
        usage_report: Callable[[str], Awaitable[str]] | None = None,
        exports: Exports | None = None,
        extensions: Extensions = Extensions(),  # noqa: B008 - frozen, never mutated
        plugin_timeout: float = 10.0,
        personas: Mapping[str, Sequence[PersonaChoice]] | None = None,
        scenes: Mapping[str, float] | None = None,
        scene_store: SceneStore | None = None,
        languages: Languages | None = None,
    ) -> None:
        self._store = store
        # The language of each answer: the bot's persona's, or the asker's (docs/i18n.md).
        self._languages = languages or Languages()
        self._scene_store = scene_store
        # Bots whose personas speak together, with how long /stop mutes them (seconds).
        self._scenes = dict(scenes or {})
        # Each bot's personas, its default first; /persona exists where there are several.
        self._personas = {bot: tuple(c) for bot, c in (personas or {}).items()}
        self._plugin_timeout = plugin_timeout
        self._clock = clock
        self._greeting = greeting
        self._memory = memory
        self._forget_deletes_messages = forget_deletes_messages
        self._is_admin = is_admin or (lambda bot, user: False)
        self._usage_report = usage_report
        self._exports = exports
        self._specs: dict[str, CommandSpec] = {}
        self._suggesters: dict[tuple[str, str], Suggester] = {
            ("persona", "name"): self._personas_like
        }
        # Descriptions are marked (N_) here and translated where shown (/help, menus).
        self.register("start", N_("say hello"), self._start)
        self.register("new", N_("start a new conversation (forget this chat's context)"), self._new)
        self.register("reset", N_("same as /new"), self._new)
        if memory is not None:
            self.register("memory", N_("show what I remember about you"), self._show_memory)
            self.register("forget", N_("erase what I remember about you"), self._forget)
            if exports is not None:
                self.register("export", N_("send you everything stored about you"), self._export)
        if any(len(c) > 1 for c in self._personas.values()):
            self.register(
                "persona", N_("list the personas or switch: /persona NAME"), self._persona
            )
        self.register("help", N_("list the commands"), self._help)
        if self._scenes and scene_store is not None:
            self.register(
                "stop", N_("mute the scene (admins; /stop off ends it)"), self._stop, admin=True
            )
        if usage_report is not None:
            self.register(
                "stats", N_("usage and cost today (admins only)"), self._stats, admin=True
            )
        self._extensions = extensions
        self._plugin: dict[str, dict[str, CommandSpec]] = {}
        for scope in (extensions, *extensions.per_bot.values()):
            for spec in scope.commands:
                if spec.name in BUILTIN_COMMANDS:
                    raise ConfigError([f"command /{spec.name}: a built-in command's name"])
        self._global = {spec.name: spec for spec in extensions.commands}

    @property
    def languages(self) -> Languages:
        """The languages of the bots' answers and menus."""
        return self._languages

    def _plugin_specs(self, bot: str) -> dict[str, CommandSpec]:
        """The plugin commands of ``bot``: global ones, then its own (cached)."""
        specs = self._plugin.get(bot)
        if specs is None:
            specs = {s.name: s for s in self._extensions.for_bot(bot).commands}
            self._plugin[bot] = specs
        return specs

    def _offered(self, bot: str, name: str) -> bool:
        """Whether built-in command ``name`` exists on ``bot`` (/persona: several personas
        that take turns, not a scene; /stop: a scene)."""
        if name == "stop":
            return bot in self._scenes
        return name != "persona" or (
            len(self._personas.get(bot, ())) > 1 and bot not in self._scenes
        )

    def _spec(self, bot: str, name: str) -> tuple[CommandSpec, bool] | None:
        """The command ``name`` of ``bot`` and whether a plugin registered it."""
        if name in self._specs and self._offered(bot, name):
            return self._specs[name], False
        spec = self._plugin_specs(bot).get(name)
        return None if spec is None else (spec, True)

    def register(
        self, name: str, description: str, handler: Handler, *, admin: bool = False
    ) -> None:
        """Add a command (replaces one of the same name)."""
        self._specs[name] = CommandSpec(name, description, handler, admin)

    @property
    def specs(self) -> tuple[CommandSpec, ...]:
        """Built-in and global plugin commands everyone may use, in registration order."""
        specs = [*self._specs.values(), *self._global.values()]
        return tuple(spec for spec in specs if not spec.admin)

    def specs_for(self, bot: str) -> tuple[CommandSpec, ...]:
        """The commands everyone may use on ``bot`` (for /help and platform menus)."""
        specs = [s for s in self._specs.values() if self._offered(bot, s.name)]
        specs += self._plugin_specs(bot).values()
        return tuple(spec for spec in specs if not spec.admin)

    def admin_names(self, bot: str | None = None) -> tuple[str, ...]:
        """The admin-only commands of ``bot`` (None: of any bot), in no menu."""
        if bot is None:
            specs = [*self._specs.values(), *self._global.values()]
        else:
            specs = [s for s in self._specs.values() if self._offered(bot, s.name)]
            specs += self._plugin_specs(bot).values()
        return tuple(spec.name for spec in specs if spec.admin)

    def admin_specs(self, bot: str) -> tuple[CommandSpec, ...]:
        """The admin-only commands of ``bot`` (for the admins' own menu)."""
        specs = [s for s in self._specs.values() if self._offered(bot, s.name)]
        specs += self._plugin_specs(bot).values()
        return tuple(spec for spec in specs if spec.admin)

    def every_spec(self, bot: str) -> tuple[tuple[CommandSpec, bool], ...]:
        """Every command of ``bot``, admin ones included, and whether a plugin registered it
        (for native command menus: docs/discord.md#7-commands)."""
        built_in = [(s, False) for s in self._specs.values() if self._offered(bot, s.name)]
        return (*built_in, *((s, True) for s in self._plugin_specs(bot).values()))

    def suggest_with(self, command: str, option: str, suggester: Suggester) -> None:
        """Offer values for ``option`` of built-in ``command`` while a person types it."""
        self._suggesters[(command, option)] = suggester

    async def suggest(
        self, inbound: Inbound, command: str, option: str, typed: str
    ) -> tuple[Suggestion, ...]:
        """Values for ``option`` of ``/command`` that ``inbound``'s author may see (their
        own data only; nothing for a command the bot lacks or they may not run)."""
        found = self._spec(inbound.conversation.bot, command)
        suggester = self._suggesters.get((command, option))
        if found is None or found[1] or suggester is None:
            return ()
        if found[0].admin and not self._is_admin(inbound.conversation.bot, inbound.author_id):
            return ()
        return (await suggester(inbound, typed))[:SUGGESTIONS]

    async def _personas_like(self, inbound: Inbound, typed: str) -> tuple[Suggestion, ...]:
        wanted = typed.strip().casefold()
        return tuple(
            Suggestion(f"{c.name} ({c.id})", c.id)
            for c in self._personas.get(inbound.conversation.bot, ())
            if wanted in c.id.casefold() or wanted in c.name.casefold()
        )

    def knows(self, name: str, bot: str | None = None) -> bool:
        """Whether a command of this name is registered (for ``bot``, or built-in/global)."""
        if bot is not None:
            return self._spec(bot, name) is not None
        return name in self._specs or name in self._global

    async def handle(self, inbound: Inbound, command: Command) -> str | Answer | None:
        """Run a command; the text (or Answer with choices) to answer with now, or None (it
        answers by itself)."""
        answer = await self._handle(inbound, command)
        found = self._spec(inbound.conversation.bot, command.name)
        if answer is None or (found is not None and found[1] and not isinstance(answer, Refusal)):
            # A plugin's answer is its own text (its markup is left alone); the refusals
            # around it (admins only, the plugin failed) are the bot's.
            return answer
        # Directional marks for a right-to-left language (docs/i18n.md#shipped-languages);
        # an Answer's text alike (its button labels are single runs and stay unmarked).
        texts = self._languages.for_inbound(inbound)
        if isinstance(answer, Answer):
            return replace(
                answer,
                text=texts.finish(answer.text),
                choices=tuple(_typed_in(texts, c) for c in answer.choices),
            )
        return texts.finish(answer)

    async def _handle(self, inbound: Inbound, command: Command) -> str | Answer | None:
        _ = self._languages.for_inbound(inbound)
        found = self._spec(inbound.conversation.bot, command.name)
        if found is None:
            return Refusal(
                _("Unknown command /{name}. Send /help for the list.").format(name=command.name)
            )
        spec, plugin = found
        if not plugin and command.name in PERSONAL_COMMANDS and not is_person(inbound.author_id):
            return Refusal(_(NOT_A_PERSON).format(name=command.name))
        if spec.admin and not self._is_admin(inbound.conversation.bot, inbound.author_id):
            log.info("admin command /%s refused to user %s", command.name, inbound.author_id)
            return Refusal(_("/{name} is for the bot's admins.").format(name=command.name))
        log.info("command /%s in %s", command.name, inbound.conversation)
        if not plugin:
            # Built-in: a store fault propagates, so the adapter retries the update.
            return await spec.handler(inbound, command)
        try:
            # Bounded: the bot's updates wait behind a command (they are handled in order).
            answer: object = await within(
                self._clock, self._plugin_timeout, spec.handler(inbound, command)
            )
        except TimeoutError:
            log.error(
                "plugin command /%s in %s did not answer within %gs; given up",
                command.name,
                inbound.conversation,
                self._plugin_timeout,
            )
            return Refusal(_(PLUGIN_FAILED).format(name=command.name))
        except Exception:
            # A plugin's bug must not block the platform's update stream (polling would
            # retry the same update forever): logged, and the person hears it failed.
            log.exception("plugin command /%s failed in %s", command.name, inbound.conversation)
            return Refusal(_(PLUGIN_FAILED).format(name=command.name))
        if answer is not None and not isinstance(answer, str | Answer):
            # The same bug in another shape (an int, a dict): sending it would raise in Delivery.
            log.error(
                "plugin command /%s returned %s, not text or None",
                command.name,
                type(answer).__name__,
            )
            return Refusal(_(PLUGIN_FAILED).format(name=command.name))
        return answer

    async def _start(self, inbound: Inbound, command: Command) -> str:
        # Telegram's first message to a bot: answered like any command, so after the access
        # check (a person outside the allow lists gets the denied reply, once a day). The
        # answer goes into the open session (opened here if none is), whose opening it is.
        session = await self._store.current_session(inbound.conversation)
        if session is None:
            session = await self._store.open_session(inbound.conversation, self._clock.now())
        return Verbatim(self._greeting(session, inbound))

    async def _new(self, inbound: Inbound, command: Command) -> str:
        _ = self._languages.for_inbound(inbound)
        session = await self._store.new_session(
            inbound.conversation, self._clock.now(), reason=command.name
        )
        if self._memory is not None:
            # The session just ended: learn from it now rather than at the next sweep.
            self._memory.schedule_sweep([inbound.conversation.bot])
        started = _(
            "New session started (#{number}); earlier messages of this chat are no longer "
            "part of the conversation."
        ).format(number=session.key.session_id)
        # The bot's line in the bot's language, the greeting as the persona wrote it.
        return Verbatim(f"{_.finish(started)}\n{self._greeting(session, inbound)}")

    async def _stop(self, inbound: Inbound, command: Command) -> str:
        # The scene's mute (docs/scenes.md#loops), read before each line: a chain of lines
        # between personas stops before its next one. A status text, never in the
        # transcript. The conversation's, not its session's: /new does not end it.
        assert self._scene_store is not None  # registered only with it
        _ = self._languages.for_inbound(inbound)
        conversation = inbound.conversation
        now = self._clock.now()
        if command.args.strip().casefold() == "off":
            await self._scene_store.mute_scene(conversation, None, now)
            return _("The scene may speak again.")
        seconds = self._scenes[conversation.bot]
        await self._scene_store.mute_scene(conversation, now + seconds, now)
        minutes = seconds / 60
        # A fraction of a minute takes the plural that "2" takes (English "1.5 minutes",
        # Russian and Ukrainian the genitive singular).
        return _.ngettext(
            "The scene is muted for {minutes} minute (/stop off ends it).",
            "The scene is muted for {minutes} minutes (/stop off ends it).",
            int(minutes) if minutes.is_integer() else 2,
        ).format(minutes=f"{minutes:g}")

    async def _persona(self, inbound: Inbound, command: Command) -> str | Answer:
        # Anyone in the chat may switch, as anyone may /new (docs/personas.md#several-personas):
        # the switch opens a new session, so what the old persona read stays in the old one.
        _ = self._languages.for_inbound(inbound)
        conversation = inbound.conversation
        choices = self._personas.get(conversation.bot, ())
        session = await self._store.current_session(conversation)
        if session is None:
            session = await self._store.open_session(conversation, self._clock.now())
        current = session.persona or choices[0].id
        wanted = command.args.strip().casefold()
        if not wanted:
            # Names as written: the listing is Markdown, the buttons plain (bot/core/markup.py).
            lines = [
                f"{'> ' if c.id == current else '  '}{literal(c.name)} ({literal(c.id)})"
                for c in choices
            ]
            # Each other persona as a button (docs/telegram.md#buttons): the press is
            # /persona ID, run as if typed.
            buttons = tuple(Choice(c.name, f"/persona {c.id}") for c in choices if c.id != current)
            text = _("Personas here (send /persona NAME to switch):") + "\n" + "\n".join(lines)
            return Answer(text, buttons)
        chosen = next((c for c in choices if wanted in (c.id.casefold(), c.name.casefold())), None)
        if chosen is None:
            names = ", ".join(f"{literal(c.name)} ({literal(c.id)})" for c in choices)
            return Refusal(
                _("No persona {name} here. Choose one of: {names}.").format(
                    name=literal(repr(command.args.strip())), names=names
                )
            )
        if chosen.id == current:
            return _("{name} is already here.").format(name=literal(chosen.name))
        switched = await self._store.new_session(
            conversation, self._clock.now(), reason="persona", persona=chosen.id
        )
        if self._memory is not None:
            self._memory.schedule_sweep([conversation.bot])  # learn from the session that ended
        return Verbatim(self._greeting(switched, inbound))

    async def _show_memory(self, inbound: Inbound, command: Command) -> str:
        # Only ever the asker's own record, whoever else is in the chat; in a group only what
        # may appear in that group's prompt. The group note never says whether anything is
        # held back, so the group cannot tell whether the person talks to the bot privately.
        assert self._memory is not None
        _ = self._languages.for_inbound(inbound)
        user = UserKey(inbound.conversation.platform, inbound.author_id)
        if inbound.is_private:
            record = await self._memory.user_memory(user)  # only the person is there
        else:
            # The bot's own policy, exactly as its prompts apply it (share_across_groups too).
            record = await self._memory.visible_memory(
                user, inbound.conversation, private_chat=False, persona=EVERY_PERSONA
            )
        note = "" if inbound.is_private else f"\n\n{_(GROUP_MEMORY_NOTE)}"
        if not record.items:
            if not inbound.is_private:
                return _("I have nothing about you to show in this group.") + note
            return _(
                "I don't keep any long-term memory about you yet. I learn what matters when a "
                "conversation goes quiet for a while or ends (/new)."
            )
        return _("What I remember about you:") + "\n" + record.render(inbound.display_name) + note

    async def _forget(self, inbound: Inbound, command: Command) -> str | Answer:
        assert self._memory is not None
        # Asked first, erased only on the asker's own confirmation (a button bound to them,
        # docs/telegram.md#buttons, or /forget confirm typed by them).
        word = command.args.strip().casefold()
        _ = self._languages.for_inbound(inbound)
        if word in FORGET_CANCEL:
            return _("Nothing was erased.")
        if word not in FORGET_CONFIRM:
            ask = _(FORGET_ASK_MESSAGES if self._forget_deletes_messages else FORGET_ASK)
            keep = Choice(_("No, keep it"), "/forget cancel")
            return Answer(ask, (Choice(_("Yes, erase"), "/forget confirm"), keep))
        user = UserKey(inbound.conversation.platform, inbound.author_id)
        # Memory (and, when enabled, messages, replies, outbox rows, summaries) in every chat;
        # the report says exactly what went and what stays (memory/privacy.py).
        report = await self._memory.erase(user, delete_messages=self._forget_deletes_messages)
        session = await self._store.current_session(inbound.conversation)
        if session is not None:
            await self._store.delete_state(session.key)
        cleared = _("This chat's saved choices were cleared too.")
        return f"{report.describe(_)} {cleared}"

    async def _export(self, inbound: Inbound, command: Command) -> str | None:
        # Off the inbound path: one file, built and sent by Exports (privately from a group).
        assert self._exports is not None
        return await self._exports.request(inbound)

    async def _stats(self, inbound: Inbound, command: Command) -> str:
        assert self._usage_report is not None
        return await self._usage_report(inbound.conversation.bot)

    async def _help(self, inbound: Inbound, command: Command) -> str:
        _ = self._languages.for_inbound(inbound)
        bot = inbound.conversation.bot
        admin = self._is_admin(bot, inbound.author_id)
        every = [s for s in self._specs.values() if self._offered(bot, s.name)]
        every += self._plugin_specs(bot).values()
        specs = [s for s in every if admin or not s.admin]
        # A built-in description is in the catalogs; a plugin's comes out as written.
        lines = [f"/{spec.name} - {_(spec.description)}" for spec in specs]
        return _("Commands:") + "\n" + "\n".join(lines)
