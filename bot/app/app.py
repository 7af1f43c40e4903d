"""The App: personabot's public entry, the one composition root (docs/plugins.md).

``personabot run``, ``chat``, the admin commands and the tests all start here::

    app = App.from_toml("personabot.toml")
    app.load_plugin("my_plugins.dice")
    await app.run()

Plugins register on the App (``setup(app)``): commands, middleware, turn hooks, tools,
platforms and model providers, and lifespans for their own resources (bot/app/lifespans.py).
The wiring itself is ``bot.app.build.runtime``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import inspect
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, cast, overload

from adapters.base import BaseAdapter
from bot.app import build
from bot.app.build import PlatformFactory, ProviderFactory, Runtime, Seams, TranscriberFactory
from bot.app.build.voices import (
    SynthesizerFactory,
    build_voices,
    builtin_synthesizers,
    unknown_synthesizers,
)
from bot.app.lifespans import Lifespan, Lifespans
from bot.config import (
    DEFAULT_TOKEN_VARIABLES,
    BotSettings,
    PersonaSettings,
    RunNeeds,
    Secrets,
    Settings,
    load_settings,
    scene_accounts,
)
from bot.core.clock import Clock
from bot.core.errors import ConfigError, PersonabotError
from bot.core.llm import BaseLLM
from bot.core.media import Transcriber
from bot.core.ports import Outlet
from bot.runtime.commands import BUILTIN_COMMANDS
from bot.runtime.extensions import (
    AfterReply,
    BeforeModel,
    CommandSpec,
    Extensions,
    Handler,
    Middleware,
)
from bot.runtime.tools import Tool, ToolFunction, ToolRegistry, ToolSource
from bot.store.base import BaseStore
from memory.service import Memory, MemoryPolicy

log = logging.getLogger("personabot.app")

#: The entry-point group where installed packages offer plugins (loaded only when named).
ENTRY_POINT_GROUP = "personabot.plugins"
_COMMAND_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_REGISTRY_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_ERROR_CHARS = 300

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class _Registrations:
    """What the plugins of one scope (every bot, or one bot) registered, in order."""

    commands: dict[str, CommandSpec] = field(default_factory=dict)
    middleware: list[Middleware] = field(default_factory=list)
    before_model: list[BeforeModel] = field(default_factory=list)
    after_reply: list[AfterReply] = field(default_factory=list)
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    # Tools known at run time (a hand-built Extensions' sources: ``App.extend``).
    sources: list[ToolSource] = field(default_factory=list)

    def frozen(self) -> Extensions:
        return Extensions(
            commands=tuple(self.commands.values()),
            middleware=tuple(self.middleware),
            before_model=tuple(self.before_model),
            after_reply=tuple(self.after_reply),
            tools=self.tools,
            sources=tuple(self.sources),
        )


class App:
    """One personabot process: settings, secrets, plugins, and the runtime they make."""

    def __init__(
        self,
        settings: Settings,
        secrets: Secrets | None = None,
        *,
        clock: Clock | None = None,
        llm: BaseLLM | None = None,
    ) -> None:
        self.settings = settings
        self.secrets = secrets or Secrets()
        self.clock = clock
        self._llm = llm
        self._platforms: dict[str, PlatformFactory] = build.builtin_platforms(settings.personas)
        self._providers: dict[str, ProviderFactory] = build.builtin_providers()
        self._transcribers: dict[str, TranscriberFactory] = build.builtin_transcribers()
        self._synthesizers: dict[str, SynthesizerFactory] = builtin_synthesizers()
        self._global = _Registrations()
        self._per_bot: dict[str, _Registrations] = {}
        self._scope: str | None = None
        self._options: Mapping[str, Any] = {}
        self._loaded: set[tuple[str | None, str]] = set()
        self._prepared = False
        self._exits: contextlib.AsyncExitStack | None = None
        self._lifespans = Lifespans(_describe)
        self._label: str | None = None  # the plugin whose setup runs now, as errors name it

    @classmethod
    def from_toml(
        cls,
        path: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        clock: Clock | None = None,
        llm: BaseLLM | None = None,
    ) -> App:
        """Load and check the TOML file (``None``: ./personabot.toml, else the bundled
        example), then its plugins; ``environ`` supplies the secrets (default: the process
        environment). ConfigError names every problem."""
        settings = load_settings(None if path is None else Path(path))
        app = cls(settings, Secrets(environ), clock=clock, llm=llm)
        app.prepare()
        return app

    # ------------------------------------------------------------------ plugin registration

    def command(self, name: str, *, help: str, admin: bool = False) -> Callable[[Handler], Handler]:
        """Register a chat command: ``@app.command("roll", help="roll dice")`` on
        ``async def roll(event: Inbound, command: Command) -> str | None``."""
        if not _COMMAND_NAME.match(name):
            raise ConfigError(
                [f"command {name!r}: 1-32 lowercase letters, digits or '_', starting with a letter"]
            )
        if name in BUILTIN_COMMANDS:
            raise ConfigError([f"command /{name}: a built-in command has this name"])
        text = " ".join(help.split())
        if not 3 <= len(text) <= 256:
            raise ConfigError([f"command /{name}: help must be 3-256 characters"])

        def register(handler: Handler) -> Handler:
            _require_async(f"command /{name}", handler)
            scope = self._current()
            if any(name in s.commands for s in self._visible_from_scope()):
                raise ConfigError([f"command /{name}: registered twice"])
            scope.commands[name] = CommandSpec(name, text, handler, admin)
            return handler

        return register

    def middleware(self, fn: Middleware) -> Middleware:
        """Register ``async def mw(event, call_next)``: runs on every inbound event (after
        the access check) before it is stored; drops it by not calling ``call_next``."""
        _require_async("middleware", fn)
        self._current().middleware.append(fn)
        return fn

    def before_model(self, fn: BeforeModel) -> BeforeModel:
        """Register ``async def hook(turn) -> str | None``: an extra prompt layer's text."""
        _require_async("before_model hook", fn)
        self._current().before_model.append(fn)
        return fn

    def after_reply(self, fn: AfterReply) -> AfterReply:
        """Register ``async def hook(turn, reply)``: runs after the reply is recorded."""
        _require_async("after_reply hook", fn)
        self._current().after_reply.append(fn)
        return fn

    @overload
    def tool(self, fn: ToolFunction, /) -> ToolFunction: ...

    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        side_effects: bool = False,
    ) -> Callable[[ToolFunction], ToolFunction]: ...

    def tool(
        self,
        fn: ToolFunction | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        side_effects: bool = False,
    ) -> ToolFunction | Callable[[ToolFunction], ToolFunction]:
        """Register a tool the model may call: ``@app.tool`` or ``@app.tool(side_effects=True)``
        on an ``async def`` with annotated parameters (its JSON schema)."""

        def register(function: ToolFunction) -> ToolFunction:
            made = Tool.from_function(
                function, name=name, description=description, side_effects=side_effects
            )
            scope = self._current()
            if any(s.tools.get(made.name) is not None for s in self._visible_from_scope()):
                raise ConfigError([f"tool {made.name!r}: registered twice"])
            scope.tools = scope.tools.with_tool(made)
            return function

        return register if fn is None else register(fn)

    def lifespan(self, fn: Lifespan) -> Lifespan:
        """Register a resource of the plugin: ``@app.lifespan`` on an ``async def`` that opens
        it, ``yield``s once and closes it. Opened when the bots start (after every plugin's
        setup), closed when they stop, the last opened first (docs/plugins.md#lifespans)."""
        label = self._label or f"lifespan {getattr(fn, '__qualname__', fn)!r}"
        self._lifespans.add(label, fn)
        return fn

    def platform(self, name: str, factory: PlatformFactory) -> None:
        """Register a platform: ``factory(entry, persona, secrets)`` makes the adapter of a
        ``[[bots]]`` entry with ``platform = name`` (its own keys in ``entry.options``)."""
        self._register(self._platforms, "platform", name, factory)

    def provider(self, name: str, factory: ProviderFactory) -> None:
        """Register a model provider: ``factory(llm_settings, secrets)`` makes the model client
        of ``[llm] provider = name`` (its own keys in ``llm_settings.options``)."""
        self._register(self._providers, "model provider", name, factory)

    def transcriber(self, name: str, factory: TranscriberFactory) -> None:
        """Register a transcriber of voice notes: ``factory(transcription_settings, secrets)``
        makes the ``bot.core.media.Transcriber`` of ``[transcription] provider = name`` (its own
        keys in ``transcription_settings.options``; an ``aclose()`` it has is called at exit)."""
        self._register(self._transcribers, "transcription provider", name, factory)

    def synthesizer(self, name: str, factory: SynthesizerFactory) -> None:
        """Register a text-to-speech provider: ``factory(voice_settings, secrets)`` makes the
        ``bot.core.speech.Synthesizer`` of a persona's ``[personas.voice] provider = name``
        (its own keys in ``voice_settings.options``; an ``aclose()`` it has is called at
        exit). docs/voices.md#plugins."""
        self._register(self._synthesizers, "text-to-speech provider", name, factory)

    def extend(self, extensions: Extensions) -> None:
        """Add what an ``Extensions`` holds (built by hand, e.g. by an embedding program or a
        test) as if registered one by one here; its ``per_bot`` parts go to those bots."""
        scopes: list[tuple[str | None, Extensions]] = [(None, extensions)]
        scopes += list(extensions.per_bot.items())
        for bot, own in scopes:
            with self._scoped(bot):
                for spec in own.commands:
                    self.command(spec.name, help=spec.description, admin=spec.admin)(spec.handler)
                for middleware in own.middleware:
                    self.middleware(middleware)
                for before in own.before_model:
                    self.before_model(before)
                for after in own.after_reply:
                    self.after_reply(after)
                for made in own.tools.tools:
                    scope = self._current()
                    if any(s.tools.get(made.name) is not None for s in self._visible_from_scope()):
                        raise ConfigError([f"tool {made.name!r}: registered twice"])
                    scope.tools = scope.tools.with_tool(made)
                self._current().sources.extend(own.sources)

    def load_plugin(self, name: str) -> None:
        """Import ``name`` (a module path, or an installed entry point of that name) and call
        its ``setup(app)``; ConfigError naming it when it cannot be imported or fails."""
        self._load(name, f"plugin {name!r}")

    @property
    def options(self) -> Mapping[str, Any]:
        """In a plugin's ``setup``: its ``[plugin_options.<name>]`` table (a per-bot plugin's
        with that bot's ``plugin_options`` over it); elsewhere empty."""
        return self._options

    # ------------------------------------------------------------------ what plugins made

    @property
    def platforms(self) -> tuple[str, ...]:
        """Names of the installed platforms."""
        return tuple(sorted(self._platforms))

    @property
    def providers(self) -> tuple[str, ...]:
        """Names of the installed model providers."""
        return tuple(sorted(self._providers))

    @property
    def plugins(self) -> tuple[str, ...]:
        """Plugins loaded so far (``name`` or ``name (bot key)`` for one bot's)."""
        return tuple(
            n if bot is None else f"{n} ({bot})"
            for bot, n in sorted(self._loaded, key=lambda item: (item[0] or "", item[1]))
        )

    def extensions(self) -> Extensions:
        """Everything registered: for every bot, and per bot."""
        per_bot = {bot: reg.frozen() for bot, reg in self._per_bot.items()}
        return _with_per_bot(self._global.frozen(), per_bot)

    def prepare(self) -> None:
        """Load the plugins the settings name (global, then each bot's) and check that every
        platform and the model provider is installed. Runs once; ``run`` calls it."""
        if self._prepared:
            return
        # Every plugin is tried and every problem gathered: one broken plugin no longer hides
        # the next one's, or a platform typo (issue 35: problems in rounds).
        problems: list[str] = []
        for index, name in enumerate(self.settings.plugins):
            problems += _problems_of(self._load, name, f"plugins[{index}] {name!r}")
        for b, entry in enumerate(self.settings.bots):
            for index, name in enumerate(entry.plugins):
                label = f"bots[{b}].plugins[{index}] {name!r}"
                if name in self.settings.plugins:
                    # Its registrations would meet the global ones: say so instead of a
                    # "registered twice" about some command the operator never wrote.
                    problems.append(f"{label}: already in the top-level plugins (every bot)")
                    continue
                with self._scoped(entry.key):
                    problems += _problems_of(self._load, name, label)
        # A plugin that failed may be the one that registers a platform or provider: only the
        # built-in names are judged then.
        failed = bool(problems)
        for b, entry in enumerate(self.settings.bots):
            if entry.platform not in self._platforms and not failed:
                problems += build.unknown(
                    "platform", f"bots[{b}].platform", entry.platform, self._platforms
                ).problems
        if self._llm is None and self.settings.llm.provider not in self._providers and not failed:
            problems += build.unknown(
                "model provider", "llm.provider", self.settings.llm.provider, self._providers
            ).problems
        provider = self.settings.transcription.provider
        if provider not in self._transcribers and not failed:
            problems += build.unknown(
                "transcription provider", "transcription.provider", provider, self._transcribers
            ).problems
        if not failed:
            problems += unknown_synthesizers(self.settings, self._synthesizers)
        if problems:
            raise ConfigError(problems)
        self._prepared = True

    async def start_problems(self) -> list[str]:
        """What ``run`` would refuse at start before connecting, found by building what it
        builds and connecting nothing: each bot's adapter (a malformed token, a webhook
        secret unset or invalid, a plugin platform's options), the model provider, the
        personas' voices (an unset key variable), the console's token (RunNeeds). ``config
        check`` said OK and ``run`` then refused (review 35a). A bot or model whose variable
        is unset is left to ``RunNeeds``, which named it."""
        problems: list[str] = []
        made: list[BaseAdapter] = []
        for entry in self.settings.bots:
            variables = [entry.token_variable, *(v for _, v in scene_accounts(entry))]
            if entry.platform in DEFAULT_TOKEN_VARIABLES and not all(
                self.secrets.get(v) for v in variables
            ):
                continue
            try:
                made.append(self.make_adapter(entry))
            except ConfigError as exc:
                problems += exc.problems
        for adapter in made:  # after all: two Discord bots' endpoints are compared while held
            await adapter.aclose()
        if self._llm is None and not RunNeeds.of(self.settings).model_key_problems(self.secrets):
            try:
                llm = self.build_llm()
            except ConfigError as exc:
                problems += exc.problems
            else:
                await llm.aclose()
        try:  # the voices' key variables and plugin factories (docs/voices.md#settings)
            voices = build_voices(self.settings, self.secrets, self._synthesizers)
        except ConfigError as exc:
            problems += exc.problems
        else:
            for voice in voices.values():
                if callable(close := getattr(voice.synthesizer, "aclose", None)):
                    await close()
        return problems

    def unused_options(self) -> list[str]:
        """Problems of ``plugin_options`` tables whose plugin is not loaded (a typo in the
        name would silently drop the operator's options). Checked by the CLI, where the TOML
        names every plugin; an embedding program may still load more by hand."""
        # Named in the TOML counts: a named plugin that failed to load has its own problem.
        loaded = {name for _, name in self._loaded} | set(self.settings.plugins)
        problems = [
            f"plugin_options.{name}: no plugin of that name is loaded "
            f"(plugins: {', '.join(sorted(loaded)) or 'none'})"
            for name in self.settings.plugin_options
            if name not in loaded
        ]
        for b, entry in enumerate(self.settings.bots):
            own = {*self.settings.plugins, *entry.plugins}
            problems += [
                f"bots[{b}].plugin_options.{name}: not a plugin of this bot "
                f"(its plugins: {', '.join(sorted(own)) or 'none'})"
                for name in entry.plugin_options
                if name not in own
            ]
        return problems

    # ------------------------------------------------------------------ running

    def build_llm(self, *, offline_fallback: bool = False) -> BaseLLM:
        """The model: the one given to the App, else the configured provider's."""
        if self._llm is not None:
            return self._llm
        label = f"llm.provider {self.settings.llm.provider!r}"
        llm = _made(
            label,
            lambda: build.build_llm(
                self.settings,
                self.secrets,
                offline_fallback=offline_fallback,
                providers=self._providers,
            ),
        )
        if not isinstance(llm, BaseLLM):
            raise ConfigError(
                [f"{label}: the factory returned {type(llm).__name__}, not a BaseLLM"]
            )
        return llm

    def build_transcriber(self) -> Transcriber | None:
        """The transcriber of voice notes ``[transcription]`` names, or None."""
        label = f"transcription.provider {self.settings.transcription.provider!r}"
        made = _made(
            label, lambda: build.build_transcriber(self.settings, self.secrets, self._transcribers)
        )
        if made is not None and not callable(getattr(made, "transcribe", None)):
            raise ConfigError(
                [f"{label}: the factory returned {type(made).__name__}, not a Transcriber"]
            )
        return cast("Transcriber | None", made)

    def make_adapter(self, entry: BotSettings) -> BaseAdapter:
        """The adapter of one ``[[bots]]`` entry, from its platform's factory."""
        factory = self._platforms.get(entry.platform)
        if factory is None:
            raise build.unknown("platform", "platform", entry.platform, self._platforms)
        persona = self.settings.persona(entry.default_persona)
        index = next((i for i, b in enumerate(self.settings.bots) if b is entry), None)
        label = f"{'' if index is None else f'bots[{index}].'}platform {entry.platform!r}"
        adapter = _made(label, lambda: factory(entry, persona, self.secrets))
        if not isinstance(adapter, BaseAdapter):
            raise ConfigError(
                [f"{label}: the factory returned {type(adapter).__name__}, not a BaseAdapter"]
            )
        return adapter

    @contextlib.asynccontextmanager
    async def running(
        self,
        bots: Mapping[str, tuple[PersonaSettings, Outlet]] | None = None,
        *,
        store: BaseStore | None = None,
        llm: BaseLLM | None = None,
        with_retention: bool = False,
        offline_fallback: bool = False,
        seams: Seams = Seams(),  # noqa: B008 - frozen, never mutated
    ) -> AsyncIterator[Runtime]:
        """Start the runtime (store, queue, pipeline, router) for ``bots`` (key -> persona and
        outlet; default: an adapter for each ``[[bots]]`` entry, not yet receiving), with the
        plugins' lifespans. The caller runs the adapters; on exit running turns finish and
        everything closes, the lifespans after the store."""
        self.prepare()
        made: list[BaseAdapter] = []
        made_closers: list[Callable[[], Awaitable[object]]] = []
        try:
            if bots is None:
                hosted: dict[str, tuple[PersonaSettings, Outlet]] = {}
                for entry in self.settings.bots:
                    adapter = self.make_adapter(entry)
                    made.append(adapter)
                    hosted[entry.key] = (self.settings.persona(entry.default_persona), adapter)
                bots = hosted
            transcriber = self.build_transcriber()
            if transcriber is not None and callable(closer := getattr(transcriber, "aclose", None)):
                made_closers.append(closer)
            voices = build_voices(self.settings, self.secrets, self._synthesizers)
            for voice in voices.values():
                if callable(closer := getattr(voice.synthesizer, "aclose", None)):
                    made_closers.append(closer)
            async with build.runtime(
                self.settings,
                llm=llm or self.build_llm(offline_fallback=offline_fallback),
                adapters=bots,
                clock=self.clock,
                store=store,
                with_retention=with_retention,
                extensions=self.extensions(),
                seams=seams,
                transcriber=transcriber,
                voices=voices,
                plugins=self._lifespans.running(),
                mcp=build.mcp_specs(self.settings, self.secrets),
            ) as rt:
                yield rt
        finally:
            for adapter in made:  # after the runtime: replies of the grace period went out
                await adapter.aclose()
            for close in made_closers:
                await close()

    def give_up_starting(self) -> None:
        """A stop request while the bots start: a plugin's lifespan still starting (or about
        to) is cancelled (bot/app/lifespans.py); ``start_given_up`` says it happened."""
        self._lifespans.give_up()

    def abandon_stopping(self) -> None:
        """A second SIGINT: a plugin's close that does not return is given up (each later
        one gets a second), so the shutdown ends (bot/app/lifespans.py)."""
        self._lifespans.abandon_stops()

    @property
    def start_given_up(self) -> bool:
        """Whether a stop request gave the plugins' start up (see ``give_up_starting``)."""
        return self._lifespans.given_up

    async def __aenter__(self) -> Runtime:
        """``async with app as rt``: ``running()`` with the configured bots."""
        exits = contextlib.AsyncExitStack()
        rt = await exits.enter_async_context(self.running())
        self._exits = exits
        return rt

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        exits, self._exits = self._exits, None
        if exits is not None:
            await exits.__aexit__(exc_type, exc, tb)

    async def run(self, *, early: Any = None) -> int:
        """``personabot run``: host every configured bot until SIGINT/SIGTERM; the exit code."""
        from bot.app.serve import run_bots

        self.prepare()
        return await run_bots(self, early=early)

    @contextlib.asynccontextmanager
    async def open_memory(
        self,
        llm: BaseLLM | None = None,
        *,
        policy_for: Callable[[str], MemoryPolicy] | None = None,
    ) -> AsyncIterator[tuple[BaseStore, Memory]]:
        """The store and memory service alone (no queue, no turns): for admin commands."""
        async with build.open_memory(
            self.settings, llm, self.clock, policy_for=policy_for
        ) as opened:
            yield opened

    # ------------------------------------------------------------------ internals

    def _current(self) -> _Registrations:
        if self._scope is None:
            return self._global
        return self._per_bot.setdefault(self._scope, _Registrations())

    def _visible_from_scope(self) -> list[_Registrations]:
        """Scopes whose names would meet this scope's on some bot (for duplicate checks)."""
        if self._scope is None:
            return [self._global, *self._per_bot.values()]
        return [self._global, self._current()]

    @contextlib.contextmanager
    def _scoped(self, bot: str | None) -> Iterator[None]:
        """Registrations inside go to ``bot`` only (a ``[[bots]]`` entry's own plugins)."""
        before, self._scope = self._scope, bot
        try:
            yield
        finally:
            self._scope = before

    def _register(
        self, registry: dict[str, Any], kind: str, name: str, factory: Callable[..., Any]
    ) -> None:
        if not _REGISTRY_NAME.match(name):
            raise ConfigError([f"{kind} {name!r}: a name is 1-64 letters, digits, '_', '.', '-'"])
        if registry.get(name) is factory:
            return  # the same factory again: a plugin loaded for several bots
        if name in registry:
            raise ConfigError([f"{kind} {name!r}: registered twice"])
        if not callable(factory):
            raise ConfigError([f"{kind} {name!r}: the factory must be callable"])
        registry[name] = factory

    def _load(self, name: str, label: str) -> None:
        key = (self._scope, name)
        if key in self._loaded:
            return  # named twice for the same scope: loaded once
        setup = _resolve(name, label)
        options = dict(self.settings.plugin_options.get(name, {}))
        entry = next((b for b in self.settings.bots if b.key == self._scope), None)
        if entry is not None:
            options |= entry.plugin_options.get(name, {})
        self._options, self._label = options, label
        try:
            setup(self)
        except ConfigError as exc:
            raise ConfigError([f"{label}: {p}" for p in exc.problems]) from None
        except Exception as exc:
            log.debug("setup of plugin %s failed", name, exc_info=True)
            raise ConfigError([f"{label}: setup failed: {_describe(exc)}"]) from None
        finally:
            self._options, self._label = {}, None
        self._loaded.add(key)


def _problems_of(step: Callable[[str, str], None], *args: str) -> list[str]:
    """The ConfigError problems of ``step(*args)``, none when it succeeds."""
    try:
        step(*args)
    except ConfigError as exc:
        return list(exc.problems)
    return []


def _resolve(name: str, label: str) -> Callable[[App], object]:
    """The ``setup`` of a plugin: an entry point of that name, else the module of that path."""
    try:
        points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)
        target: object = next(iter(points)).load() if points else importlib.import_module(name)
    except Exception as exc:
        log.debug("plugin %s cannot be imported", name, exc_info=True)
        raise ConfigError([f"{label}: cannot be imported: {_describe(exc)}"]) from None
    setup = target if inspect.isfunction(target) else getattr(target, "setup", None)
    if not callable(setup):
        raise ConfigError([f"{label}: has no setup(app) function"])
    if inspect.iscoroutinefunction(setup):
        # discord.py's extensions have `async def setup`; called here it would register
        # nothing (a coroutine never awaited) while the plugin is listed as loaded.
        raise ConfigError([f"{label}: setup(app) must be a plain def, not async def"])
    return setup


def _made(label: str, factory: Callable[[], object]) -> object:
    """What a platform or provider factory made; its failure is one ConfigError line.

    A plugin's factory raising anything else would end the process with a traceback whose
    message may hold a token it read (printed unredacted, past the logging filters).
    """
    try:
        made = factory()
    except PersonabotError:
        raise  # ours: already a clear message (the CLI masks secrets in it)
    except Exception as exc:
        log.debug("%s: the factory failed", label, exc_info=True)
        raise ConfigError([f"{label}: the factory failed: {_describe(exc)}"]) from None
    return made


def _describe(exc: BaseException) -> str:
    """``Type: message`` on one line, cut short (a plugin's message is not ours to trust)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 3] + "..."


def _require_async(what: str, fn: object) -> None:
    call = getattr(fn, "__call__", None)  # noqa: B004 - an async callable object counts too
    if not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)):
        raise ConfigError([f"{what} {getattr(fn, '__qualname__', fn)!r}: must be async def"])


def _with_per_bot(ext: Extensions, per_bot: Mapping[str, Extensions]) -> Extensions:
    return Extensions(
        commands=ext.commands,
        middleware=ext.middleware,
        before_model=ext.before_model,
        after_reply=ext.after_reply,
        tools=ext.tools,
        sources=ext.sources,
        per_bot=dict(per_bot),
    )
