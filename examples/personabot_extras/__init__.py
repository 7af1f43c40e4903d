"""Example plugins that add a platform (``personabot_extras.jsonl``), a model provider
(``personabot_extras.parrot``) and a resource held while the bots run
(``personabot_extras.journal``): see docs/plugins.md."""
