"""``python -m bot`` runs the personabot CLI."""

import sys

from bot.cli import main

sys.exit(main())
