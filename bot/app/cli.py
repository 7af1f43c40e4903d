"""The ``personabot`` command line: chat, run, config check, persona import/export."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from bot.app import eval_commands, persona_commands
from bot.app.logs import open_log_file, redact_text, setup_logging
from bot.app.signals import EarlySignals
from bot.config import (
    RunNeeds,
    Secrets,
    Settings,
    bundled_example_path,
    env_sources,
    load_settings,
)
from bot.core.errors import ConfigError, PersonabotError
from bot.core.redact import redact_url

if TYPE_CHECKING:
    from bot.app.app import App


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="personabot", description="LLM persona chat bots on Telegram and Discord."
    )
    parser.add_argument("--version", action="version", version=f"personabot {_version()}")
    parser.add_argument(
        "--log-format", choices=["text", "json"], default=None, help="log line format"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _bot_commands(sub)
    _data_commands(sub)
    config = sub.add_parser("config", help="configuration tools")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = _with_config(
        config_sub.add_parser("check", help="validate everything `run` needs, and summarise")
    )
    check.add_argument(
        "--file-only",
        action="store_true",
        help="check the file (and its PERSONABOT_ overrides), not the secrets `run` reads "
        "(tokens, API key)",
    )
    config_sub.add_parser(
        "example",
        help="print the example configuration (every key, its default and what it does)",
    )
    persona_commands.add_parser(sub)
    eval_commands.add_parser(sub)
    return parser


def _with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="TOML file (default ./personabot.toml, else the bundled example values)",
    )
    # Also after the command (``run --log-format json``, as the docs write it); SUPPRESS
    # leaves the value given before the command, if any, when it is not repeated here.
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=argparse.SUPPRESS,
        help="log line format",
    )
    return p


def _bot_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``chat``, ``run``, ``prompt`` and ``web``: the bots, and what they see."""
    chat = _with_config(sub.add_parser("chat", help="chat with a persona in the terminal"))
    chat.add_argument("--persona", default=None, help="persona id (default: the first)")
    _with_config(sub.add_parser("run", help="run the configured Telegram/Discord bots"))
    prompt = _with_config(sub.add_parser("prompt", help="print the prompt the model would get now"))
    prompt.add_argument("--platform", required=True, help="telegram, discord or console")
    prompt.add_argument("--chat", required=True, help="chat id (console: your user name)")
    prompt.add_argument("--thread", default=None, help="thread / forum topic id")
    prompt.add_argument("--bot", default=None, help="bot id when several share the platform")
    prompt.add_argument(
        "--message",
        default=None,
        help="with no input pending, preview the prompt for this next message (e.g. to see "
        "which lorebook entries it fires)",
    )
    web = _with_config(
        sub.add_parser("web", help="serve the operator console alone, against the same store")
    )
    web.add_argument(
        "--listen", default=None, help="host:port (default: [web] listen, else 127.0.0.1:8080)"
    )


def _data_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``memory``, ``retention`` and ``db``: stored data."""
    memory = sub.add_parser("memory", help="show or erase a user's long-term memory")
    memory_sub = memory.add_subparsers(dest="memory_command", required=True)
    for action in ("show", "forget"):
        p = _with_config(memory_sub.add_parser(action, help=f"{action} a user's memory"))
        p.add_argument("--platform", required=True)
        p.add_argument("--user", required=True, help="the platform's user id")
    retention = sub.add_parser("retention", help="data retention: run it or audit a policy")
    retention_sub = retention.add_subparsers(dest="retention_command", required=True)
    run_now = _with_config(retention_sub.add_parser("run", help="apply the policy now"))
    run_now.add_argument("--dry-run", action="store_true", help="only report what would go")
    audit = _with_config(retention_sub.add_parser("audit", help="sessions that would lose turns"))
    audit.add_argument("--days", type=float, default=None, help="proposed age limit")
    audit.add_argument("--mode", choices=["session", "message"], default=None)
    audit.add_argument("--json", action="store_true", help="machine-readable output")
    db = sub.add_parser("db", help="database operations")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    backup = _with_config(db_sub.add_parser("backup", help="online backup of the SQLite store"))
    backup.add_argument("path", type=Path, help="file to write")
    _with_config(db_sub.add_parser("migrate", help="apply pending schema migrations"))


def _ready(app: App, secrets: Secrets, *, file_only: bool) -> None:
    """Load the plugins and check what ``run`` needs, raising one ConfigError of every
    problem found: a platform typo and an unset token are one run of ``config check``, not
    two (issue 35). Without ``file_only``, also what ``run`` reads from the environment and
    builds before connecting (RunNeeds, App.start_problems)."""
    problems: list[str] = []
    try:
        app.prepare()
    except ConfigError as exc:
        problems += exc.problems
        prepared = False
    else:
        prepared = True
    problems += app.unused_options()
    sources = env_sources(problems, os.environ) or [None] * len(problems)
    if not file_only:
        needs = RunNeeds.of(app.settings).problems(secrets)
        if prepared:
            needs += asyncio.run(app.start_problems())
        problems += needs
        sources += [None] * len(needs)
    if problems:
        raise ConfigError(problems, sources=sources)


def _version() -> str:
    """The installed distribution's version ("unknown" when run from a bare source tree)."""
    try:
        return importlib.metadata.version("personabot")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def summary(settings: Settings, app: App | None = None) -> str:
    """A one-screen summary of a valid configuration (with the App: its plugins too)."""
    q, m = settings.queue, settings.memory
    lines = [
        "configuration OK",
        f"  storage: {redact_url(settings.storage.url)}",
        f"  model provider: {settings.llm.provider}"
        + (f" (base_url {redact_url(settings.llm.base_url)})" if settings.llm.base_url else ""),
        *(
            f"  model provider {name}: {entry.provider}"
            + (f" (base_url {redact_url(entry.base_url)})" if entry.base_url else "")
            for name, entry in settings.llm.providers.items()
        ),
        f"  queue: debounce {q.debounce_seconds}s, max wait {q.max_wait_seconds}s, "
        f"lease {q.lease_seconds}s, {q.max_concurrent_turns} concurrent turns",
        f"  memory: window {m.window_messages}-{m.fold_at} messages, "
        f"budget {m.prompt_budget_tokens} tokens",
        f"  personas ({len(settings.personas)}):",
    ]
    for p in settings.personas:
        routes = settings.routes(p)
        fallback = "" if routes.fallback is None else f", fallback {routes.fallback}"
        lines.append(
            f"    {p.id}: {p.name}, replies {routes.reply}{fallback}; memory tasks {routes.tasks}"
        )
    if settings.mcp_servers:
        lines.append(f"  MCP servers ({len(settings.mcp_servers)}):")
        for server in settings.mcp_servers:
            where = "stdio" if server.command else f"HTTP {redact_url(server.url or '')}"
            effectful = [t for t in server.tools if server.effects_of(t) == "effectful"]
            lines.append(
                f"    {server.name}: {where}, tools {', '.join(server.tools)}"
                + (f" (effectful: {', '.join(effectful)})" if effectful else "")
            )
    lines.append(f"  bots ({len(settings.bots)}):")
    for b in settings.bots:
        if b.scene is None:
            lines.append(f"    {b.key}: {b.platform}, persona {', '.join(b.persona_ids)}")
            continue
        s = b.scene
        autonomy = (
            f"autonomous up to {s.max_autonomous_turns} lines"
            if s.autonomous
            else "no lines without a human"
        )
        lines.append(
            f"    {b.key}: {b.platform}, scene of {', '.join(b.personas)}: {s.strategy}, "
            f"up to {s.max_speakers} speakers a turn, {autonomy}, "
            f"{s.max_lines_per_hour} lines an hour"
        )
    if app is not None:
        lines.append(f"  plugins: {', '.join(app.plugins) or 'none'}")
        lines.append(f"  platforms installed: {', '.join(app.platforms)}")
        lines.append(f"  model providers installed: {', '.join(app.providers)}")
    return "\n".join(lines)


def _redacted(text: str, secrets: Sequence[str]) -> str:
    """Belt and braces for the last line an operator sees: no known secret in it."""
    return redact_text(text, secrets)


def _early_signals() -> EarlySignals:
    """From the first moment of ``run``: a signal while the bot starts is replayed once the
    loop's handlers exist (a clean stop with a log line), never a kill by signal."""
    early = EarlySignals()
    early.install()
    return early


def _command(app: App, args: argparse.Namespace, log_path: str | None) -> int:
    """Run ``chat`` or an admin command on the App."""
    return asyncio.run(_coroutine(app, args, log_path))


def _coroutine(
    app: App, args: argparse.Namespace, log_path: str | None
) -> Coroutine[Any, Any, int]:
    """What ``chat`` or an admin command runs (their modules imported only when used)."""
    out = sys.stdout
    if args.command == "chat":
        from bot.app.chat import run_chat

        stdin, persona = sys.stdin, args.persona
        return run_chat(
            app,
            persona_id=persona,
            stdin=stdin,
            stdout=out,
            interactive=stdin.isatty(),
            log_path=log_path,
        )
    from bot.app import admin

    if args.command == "web":
        return admin.serve_console(app, args.listen or app.settings.web.listen or "127.0.0.1:8080")
    if args.command == "prompt":
        chat, thread, bot = args.chat, args.thread, args.bot
        return admin.show_prompt(
            app,
            out,
            platform=args.platform,
            chat=chat,
            thread=thread,
            bot=bot,
            message=args.message,
        )
    if args.command == "memory":
        action, platform = args.memory_command, args.platform
        return admin.user_memory(app, out, action=action, platform=platform, user=args.user)
    if args.command == "db":
        return admin.db_command(app, out, args.db_command, args)
    if args.retention_command == "run":
        return admin.retention_run(app, out, dry_run=args.dry_run)
    return admin.retention_audit(app, out, days=args.days, mode=args.mode, as_json=args.json)


#: Commands whose output is the terminal's whole point: their logs start at WARNING.
_QUIET = frozenset({"chat", "prompt", "memory"})
#: Where ``chat`` logs when its stderr is the terminal of the conversation (working directory).
CHAT_LOG = "personabot-chat.log"
#: The exit code of a command whose reader went away (``personabot config check | head``),
#: as a shell reports a process ended by SIGPIPE.
EXIT_PIPE = 128 + 13


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    try:
        code = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader closed the pipe: no traceback, and nothing more to write (Python would
        # complain again when it flushes stdout at exit).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    return code


def _level(command: str, level: str) -> str:
    """The log level of ``command``: for those whose output is the terminal's point, routine
    INFO lines (a new store's 16 migrations, say) stay out of the chat, prompt or memory."""
    return "WARNING" if command in _QUIET and level == "INFO" else level


def _chat_on_terminal(command: str) -> bool:
    """Whether this is ``chat`` with stderr on the terminal, between the conversation's lines."""
    try:
        return command == "chat" and sys.stderr.isatty()
    except (AttributeError, ValueError):  # stderr closed or replaced
        return False


def _chat_log() -> TextIO | None:
    """The chat's log file, or None (said on stderr: the records go there instead)."""
    try:
        return open_log_file(Path(CHAT_LOG))
    except OSError as exc:
        print(
            f"personabot: not logging to a file: {exc.strerror}; log records go to stderr",
            file=sys.stderr,
        )
        return None


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    # persona works on files, not on a loaded configuration; eval loads its own settings,
    # with its flags on top.
    own = {"persona": persona_commands.run, "eval": eval_commands.run}.get(args.command)
    if own is not None:
        return own(args)
    if args.command == "config" and args.config_command == "example":
        # What an installed wheel's operator starts from (docs/deploy.md): no checkout.
        sys.stdout.write(bundled_example_path().read_text(encoding="utf-8"))
        return 0
    early = _early_signals() if args.command == "run" else None
    secrets = Secrets()
    loaded: Settings | None = None

    def known() -> list[str]:
        # Asked anew at each use: a plugin's factory may read a secret of any name later.
        if loaded is None:
            return secrets.values()
        return [*secrets.values(loaded.secret_names()), *loaded.credentials()]

    try:
        # run and config check (not --file-only) name what the environment lacks in the
        # same round as the file's problems.
        checks_env = args.command == "run" or (
            args.command == "config" and not getattr(args, "file_only", False)
        )
        settings = loaded = load_settings(args.config, needs=secrets if checks_env else None)
        level = _level(args.command, settings.logging.level)
        # A chat on a terminal keeps its log records out of the conversation: in a file,
        # named in the chat's opening line. Redirected stderr is where the operator wants them.
        log_file = _chat_log() if _chat_on_terminal(args.command) else None
        log_path = CHAT_LOG if log_file is not None else None
        setup_logging(level, known, log_file, fmt=args.log_format or settings.logging.format)
        # One composition root for every command; plugins load (and platform and provider
        # names are checked) for those that run bots, not for the admin commands. Imported
        # here: a signal during these imports is already recorded (EarlySignals).
        from bot.app.app import App

        app = App(settings, secrets)
        if args.command in ("config", "chat", "run"):
            # `chat` needs no bots, tokens or key (the offline model stands in).
            _ready(
                app, secrets, file_only=args.command == "chat" or getattr(args, "file_only", False)
            )
        if args.command == "config":
            print(_redacted(summary(settings, app), known()))
            return 0
        if args.command == "run":
            return asyncio.run(app.run(early=early))
        return _command(app, args, log_path)
    except ConfigError as exc:
        for line in exc.lines():
            print(_redacted(f"personabot: config error: {line}", known()), file=sys.stderr)
        return 2
    except PersonabotError as exc:
        print(_redacted(f"personabot: {exc}", known()), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
