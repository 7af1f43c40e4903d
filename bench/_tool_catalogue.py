"""Synthetic MCP tools for bench/tools.py: six servers of five tools each, with descriptions and
JSON schemas of the size real servers list (enums, formats, bounds, defaults, required keys)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import pydantic

from bot.runtime.tools import Tool

#: (server, tool, description, parameters): a parameter is (name, JSON schema, required).
_P = tuple[str, dict[str, Any], bool]


def _s(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **more}


def _i(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "integer", "description": description, **more}


_LIMIT: Final = _i("How many results to return at most.", minimum=1, maximum=50, default=10)
_WHEN: Final = _s("An ISO 8601 date-time with its offset, e.g. 2026-03-01T18:30:00+01:00.")
_WHEN["format"] = "date-time"

CATALOGUE: Final[tuple[tuple[str, str, str, tuple[_P, ...]], ...]] = (
    (
        "notes",
        "search",
        "Search the person's notes by words or phrases; returns matching notes "
        "with their ids, titles and a short excerpt, best match first.",
        (
            ("query", _s("Words to look for; quotes match a phrase."), True),
            ("limit", _LIMIT, False),
            ("tag", _s("Only notes with this tag."), False),
        ),
    ),
    (
        "notes",
        "read",
        "Read one note in full: its title, tags, text and when it was changed.",
        (("note_id", _s("The id of a note, as search returns it."), True),),
    ),
    (
        "notes",
        "append",
        "Append a paragraph to a note, or create the note when no id is given.",
        (
            ("text", _s("The paragraph to add, in Markdown.", maxLength=4000), True),
            ("note_id", _s("The note to add to; omit to create a new note."), False),
            ("title", _s("The title of a new note."), False),
        ),
    ),
    (
        "notes",
        "tag",
        "Add or remove tags of a note.",
        (
            ("note_id", _s("The note."), True),
            (
                "add",
                {"type": "array", "items": {"type": "string"}, "description": "Tags to add."},
                False,
            ),
            (
                "remove",
                {"type": "array", "items": {"type": "string"}, "description": "Tags to remove."},
                False,
            ),
        ),
    ),
    (
        "notes",
        "recent",
        "The notes changed most recently, newest first.",
        (("limit", _LIMIT, False),),
    ),
    (
        "calendar",
        "list_events",
        "The events of the person's calendar between two times, with "
        "their ids, titles, places and attendees.",
        (
            ("start", _WHEN, True),
            ("end", _WHEN, True),
            ("calendar", _s("Which calendar.", enum=["personal", "work", "family"]), False),
        ),
    ),
    (
        "calendar",
        "create_event",
        "Create an event in the person's calendar; the person is told and may decline it.",
        (
            ("title", _s("What the event is."), True),
            ("start", _WHEN, True),
            ("end", _WHEN, True),
            ("place", _s("Where it takes place."), False),
            ("reminder_minutes", _i("Remind this many minutes before.", minimum=0), False),
        ),
    ),
    (
        "calendar",
        "free_slots",
        "Free time slots of at least a given length between two times.",
        (
            ("start", _WHEN, True),
            ("end", _WHEN, True),
            ("minutes", _i("The shortest slot wanted, in minutes.", minimum=5), True),
        ),
    ),
    (
        "calendar",
        "find_event",
        "Find events by words in their title, place or notes.",
        (("query", _s("Words to look for."), True), ("limit", _LIMIT, False)),
    ),
    ("calendar", "timezone", "The person's time zone and the local time there now.", ()),
    (
        "weather",
        "forecast",
        "The weather forecast for a place: temperature, sky, rain and wind "
        "per day, up to 7 days ahead.",
        (
            ("place", _s("A city or address."), True),
            ("days", _i("How many days ahead.", minimum=1, maximum=7, default=3), False),
            ("units", _s("Units.", enum=["metric", "imperial"], default="metric"), False),
        ),
    ),
    (
        "weather",
        "now",
        "The weather at a place right now.",
        (("place", _s("A city or address."), True),),
    ),
    (
        "weather",
        "air_quality",
        "Air quality and pollen at a place today.",
        (("place", _s("A city or address."), True),),
    ),
    (
        "weather",
        "sunrise",
        "Sunrise and sunset at a place on a date.",
        (
            ("place", _s("A city or address."), True),
            ("date", _s("A date, YYYY-MM-DD.", format="date"), False),
        ),
    ),
    (
        "weather",
        "alerts",
        "Official weather warnings in force at a place.",
        (("place", _s("A city or address."), True),),
    ),
    (
        "library",
        "search_books",
        "Search the public library's catalogue by title, author, "
        "subject or ISBN; returns books with their availability at each branch.",
        (
            ("query", _s("Title, author, subject or ISBN."), True),
            ("branch", _s("Only this branch."), False),
            ("limit", _LIMIT, False),
            ("format", _s("Format.", enum=["book", "ebook", "audiobook"]), False),
        ),
    ),
    ("library", "loans", "The person's current loans with their due dates.", ()),
    (
        "library",
        "renew",
        "Renew a loan by its id; fails when someone reserved the book.",
        (("loan_id", _s("The loan."), True),),
    ),
    (
        "library",
        "reserve",
        "Reserve a book for pick-up at a branch.",
        (
            ("book_id", _s("The book, as search_books returns it."), True),
            ("branch", _s("Where to pick it up."), True),
        ),
    ),
    (
        "library",
        "events",
        "Readings, clubs and workshops at the library in the coming weeks.",
        (("branch", _s("Only this branch."), False), ("limit", _LIMIT, False)),
    ),
    (
        "transit",
        "journey",
        "Public transport journeys between two places, leaving or arriving "
        "at a given time, with changes, walking and delays.",
        (
            ("origin", _s("Where from: a stop, address or place."), True),
            ("destination", _s("Where to."), True),
            ("time", _WHEN, False),
            (
                "arrive_by",
                {
                    "type": "boolean",
                    "default": False,
                    "description": "Whether time is the arrival time.",
                },
                False,
            ),
        ),
    ),
    (
        "transit",
        "departures",
        "The next departures at a stop.",
        (("stop", _s("A stop name or id."), True), ("limit", _LIMIT, False)),
    ),
    (
        "transit",
        "disruptions",
        "Current disruptions on the lines near a place.",
        (("place", _s("A stop, address or place."), True),),
    ),
    (
        "transit",
        "stops_near",
        "Stops within walking distance of a place.",
        (
            ("place", _s("An address or place."), True),
            ("metres", _i("Walking distance.", minimum=100, maximum=2000, default=500), False),
        ),
    ),
    (
        "transit",
        "fares",
        "The fare of a journey for a kind of traveller.",
        (
            ("origin", _s("Where from."), True),
            ("destination", _s("Where to."), True),
            ("traveller", _s("Who.", enum=["adult", "child", "senior", "student"]), False),
        ),
    ),
    (
        "recipes",
        "search",
        "Search recipes by dish, ingredient or cuisine, with diet filters.",
        (
            ("query", _s("Dish, ingredient or cuisine."), True),
            ("diet", _s("Diet.", enum=["any", "vegetarian", "vegan", "gluten-free"]), False),
            ("max_minutes", _i("Longest preparation time.", minimum=5), False),
            ("limit", _LIMIT, False),
        ),
    ),
    (
        "recipes",
        "read",
        "One recipe: ingredients with quantities, steps and timings.",
        (
            ("recipe_id", _s("The recipe."), True),
            ("servings", _i("Scale to this many servings.", minimum=1, maximum=24), False),
        ),
    ),
    (
        "recipes",
        "from_pantry",
        "Recipes that use what the person has at home.",
        (
            (
                "ingredients",
                {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "description": "What is at home.",
                },
                True,
            ),
            ("limit", _LIMIT, False),
        ),
    ),
    (
        "recipes",
        "shopping_list",
        "Add a recipe's missing ingredients to the shopping list.",
        (("recipe_id", _s("The recipe."), True),),
    ),
    (
        "recipes",
        "substitute",
        "What to use instead of an ingredient in a recipe.",
        (
            ("ingredient", _s("The ingredient to replace."), True),
            ("recipe_id", _s("The recipe it is for."), False),
        ),
    ),
)

_ANY_ARGUMENTS: Final = pydantic.create_model(
    "mcp_arguments", __config__=pydantic.ConfigDict(extra="allow")
)


def schema(parameters: Sequence[_P]) -> dict[str, Any]:
    """A JSON schema as MCP servers list them (an object, its properties, what is required)."""
    out: dict[str, Any] = {
        "type": "object",
        "properties": {name: spec for name, spec, _ in parameters},
        "additionalProperties": False,
    }
    required = [name for name, _, needed in parameters if needed]
    if required:
        out["required"] = required
    return out


def mcp_tools(count: int) -> tuple[Tool, ...]:
    """The first ``count`` tools of the catalogue, in listing order (server by server)."""

    def runner(name: str) -> Any:
        async def run(**arguments: Any) -> str:
            rows = [
                {"id": f"{name}-{i}", "title": f"Result {i} of {name}", "excerpt": "x" * 80}
                for i in range(4)
            ]
            return json.dumps({"results": rows})

        return run

    tools = []
    for server, tool, description, parameters in CATALOGUE[:count]:
        name = f"{server}__{tool}"
        tools.append(
            Tool(name, description, schema(parameters), False, runner(name), _ANY_ARGUMENTS)
        )
    return tuple(tools)
