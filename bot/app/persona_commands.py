"""``personabot persona import`` (docs/personas.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bot.core.errors import CardError, ConfigError, PersonabotError


def add_parser(sub: Any) -> None:
    """The ``persona`` command and its two actions, on the CLI's subparsers."""
    persona = sub.add_parser("persona", help="import Character Cards (V2/V3)")
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


def run(args: argparse.Namespace) -> int:
    """Run ``persona import``; one error line and exit 2 on bad input."""
    try:
        from bot.personas.importer import import_card

        done = import_card(args.card, out=args.out, persona_id=args.id, bot=args.bot)
        print("\n".join(done.lines))
        return 0
    except CardError as exc:
        print(f"personabot: card error: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"personabot: config error: {exc}", file=sys.stderr)
        return 2
    except PersonabotError as exc:
        print(f"personabot: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"personabot: cannot write: {exc}", file=sys.stderr)
        return 1
