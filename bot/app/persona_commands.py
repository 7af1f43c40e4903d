"""``personabot persona import``, ``import-lorebook`` and ``export`` (docs/personas.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bot.core.errors import CardError, ConfigError, PersonabotError


def add_parser(sub: Any) -> None:
    """The ``persona`` command and its actions, on the CLI's subparsers."""
    persona = sub.add_parser(
        "persona", help="import or export Character Cards (V1/V2/V3), import lorebooks"
    )
    actions = persona.add_subparsers(dest="persona_command", required=True)
    imp = actions.add_parser("import", help="a card (.json, .png, .charx) as a [[personas]] entry")
    imp.add_argument("card", type=Path, help="the card file")
    imp.add_argument("--id", default=None, help="persona id (default: a slug of the name)")
    imp.add_argument(
        "--out", type=Path, default=Path("personabot.toml"), help="TOML file to append to"
    )
    imp.add_argument(
        "--bot",
        choices=["telegram", "discord"],
        default=None,
        help="also add a [[bots]] entry for the persona on this platform",
    )
    book = actions.add_parser(
        "import-lorebook",
        help="a lorebook file (SillyTavern World Info, lorebook_v3) for a persona of the TOML",
    )
    book.add_argument("lorebook", type=Path, help="the lorebook file (.json)")
    book.add_argument("--persona", required=True, help="id of the persona to give it to")
    book.add_argument(
        "--config", type=Path, default=Path("personabot.toml"), help="TOML file to edit"
    )
    exp = actions.add_parser("export", help="a persona as a Character Card V3")
    exp.add_argument("id", help="persona id")
    exp.add_argument("--format", choices=["png", "json"], default="png", dest="fmt")
    exp.add_argument(
        "--config",
        type=Path,
        default=None,
        help="TOML file (default ./personabot.toml, else the bundled example values)",
    )
    exp.add_argument("--out", type=Path, default=None, help="file to write (default ID.FORMAT)")
    exp.add_argument("--force", action="store_true", help="replace the file if it exists")


def run(args: argparse.Namespace) -> int:
    """Run a ``persona`` action; one error line and exit 2 on bad input."""
    try:
        if args.persona_command == "import":
            from bot.personas.importer import import_card

            done = import_card(args.card, out=args.out, persona_id=args.id, bot=args.bot)
            print("\n".join(done.lines))
            return 0
        if args.persona_command == "import-lorebook":
            from bot.personas.lorebook_import import import_lorebook

            done = import_lorebook(args.lorebook, persona_id=args.persona, config=args.config)
            print("\n".join(done.lines))
            return 0
        from bot.personas.exporter import export_persona

        print(
            export_persona(
                args.id, config=args.config, fmt=args.fmt, out=args.out, overwrite=args.force
            )
        )
        return 0
    except CardError as exc:
        print(f"personabot: card error: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        for line in exc.lines():
            print(f"personabot: config error: {line}", file=sys.stderr)
        return 2
    except PersonabotError as exc:
        print(f"personabot: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"personabot: cannot write: {exc}", file=sys.stderr)
        return 1
