"""``python -m personabot`` runs the personabot CLI (``python -m bot`` in a source tree)."""

import sys

from personabot import main

sys.exit(main())
