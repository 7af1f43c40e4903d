"""Character Cards (V2 and V3, as SillyTavern and card sites share them): reading the three
containers, mapping a card to a ``[[personas]]`` table and back, and writing the operator's
TOML file without losing their comments (docs/personas.md).

The layer sits right below ``bot.app``: it uses ``bot.config`` (to check that what it writes
loads) and ``bot.core``, and nothing below imports it.
"""
