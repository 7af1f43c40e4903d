"""Example plugins that add a platform (``personabot_extras.jsonl``) and a model provider
(``personabot_extras.parrot``): see docs/plugins.md."""
