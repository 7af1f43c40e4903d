"""``python -m bot`` runs the personabot CLI."""

import sys

from bot.app.cli import main

sys.exit(main())
