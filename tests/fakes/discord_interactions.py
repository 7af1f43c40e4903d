"""Application commands and interactions of the fake Discord (tests/fakes/discord_api.py).

REST, as Discord's (``Authorization: Bot <token>`` needed; another application's id: 403 code
50001 ``Missing Access``; a guild listed in :attr:`FakeAppCommands.denied_guilds`: the same, as
when the bot was invited without ``applications.commands``):

* ``GET`` / ``POST /applications/{app}/commands`` and ``PATCH`` / ``DELETE
  /applications/{app}/commands/{id}``; the same under ``/applications/{app}/guilds/{guild}``.
  ``POST`` is Discord's upsert: a command of that name in that scope is overwritten (200),
  else created (201); a listing leaves ``description_localizations`` out unless asked with
  ``?with_localizations=true``, as Discord does. Names ``[-_a-z0-9]{1,32}``, descriptions
  1-100 characters, at most 25 options: else 400 code 50035. Every write is in
  :attr:`FakeAppCommands.writes`.
* :meth:`FakeAppCommands.throttle_next_write` answers the next write 429 with ``retry_after``
  in its body (and ``Via``, as discord.py needs to tell it from a ban), changing nothing;
* ``PUT`` (bulk overwrite) is recorded in :attr:`FakeAppCommands.bulk_overwrites` and refused
  (405): a test fails when anyone tries it.

Interactions: :meth:`FakeAppCommands.invoke` (an application command, type 2) and
:meth:`FakeAppCommands.autocomplete` (type 4) dispatch ``INTERACTION_CREATE`` with a fresh id
and token, as a user in a channel, DM or thread sends them. Answers:

* ``POST /interactions/{id}/{token}/callback`` (no ``Authorization``: the token is in the
  path): types 4 (message), 5 (deferred), 8 (autocomplete choices); a second callback for one
  interaction answers 400 code 40060 ("already acknowledged"), an unknown one 404 code 10062;
* ``PATCH`` / ``DELETE /webhooks/{app}/{token}/messages/@original`` and ``POST
  /webhooks/{app}/{token}`` (followups).

Each is an :class:`Answer` in :attr:`FakeAppCommands.answers` with its interaction, kind,
content, whether it is ephemeral (flags 64; an edit or the first followup after a deferral is
as ephemeral as the deferral) and when it arrived. A public answer is also a message of the
channel, from the bot, echoed as ``MESSAGE_CREATE``; an ephemeral one is not (as on Discord).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web

from tests.fakes.server import json_body

if TYPE_CHECKING:
    from tests.fakes.discord_api import FakeDiscord, FakeUser

JSON = dict[str, Any]
EPHEMERAL = 1 << 6
_NAME = re.compile(r"^[-_a-z0-9]{1,32}$")
AnswerKind = Literal["message", "deferred", "autocomplete", "edit", "delete", "followup"]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(data).encode(), status=status, headers={"Content-Type": "application/json"}
    )


def _error(status: int, message: str, code: int = 0) -> web.Response:
    return _json({"message": message, "code": code}, status)


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer to an interaction, as the fake received it."""

    interaction: int
    kind: AnswerKind
    content: str = ""
    ephemeral: bool = False
    choices: tuple[JSON, ...] = ()
    body: JSON = field(default_factory=dict)
    at: float = 0.0


@dataclass
class FakeInteraction:
    """An interaction the fake sent, and its state."""

    id: int
    token: str
    channel_id: int
    user: FakeUser
    payload: JSON
    responded: bool = False
    deferred_ephemeral: bool = False
    followups: int = 0


@dataclass(frozen=True, slots=True)
class Write:
    """One write to the command routes: method, scope (``global`` or ``guild:<id>``), name."""

    method: str
    scope: str
    name: str
    status: int


class FakeAppCommands:
    """Application commands and interactions of one fake Discord (see the module docstring)."""

    def __init__(self, fake: FakeDiscord) -> None:
        self._fake = fake
        #: (application id, scope) -> command id -> command.
        self.commands: dict[tuple[int, str], dict[str, JSON]] = {}
        self.writes: list[Write] = []
        self.bulk_overwrites: list[str] = []
        self.denied_guilds: set[int] = set()
        #: Command writes still to be answered 429 (``retry_after`` seconds each).
        self.throttled: list[float] = []
        self.interactions: dict[int, FakeInteraction] = {}
        self.answers: list[Answer] = []
        self._tokens = itertools.count(1)

    # ------------------------------------------------------------------ world

    def scope(self, scope: str, application: int | None = None) -> dict[str, JSON]:
        """The commands of a scope (``global``, ``guild:<id>``) by name."""
        app = self._fake.application_id if application is None else application
        return {c["name"]: c for c in self.commands.get((app, scope), {}).values()}

    def add_command(
        self, name: str, description: str, *, scope: str = "global", application: int | None = None
    ) -> JSON:
        """A command someone else made (by hand for this application, or another
        application's)."""
        app = self._fake.application_id if application is None else application
        command = self._command(app, scope, {"name": name, "description": description})
        self.commands.setdefault((app, scope), {})[command["id"]] = command
        return command

    def _command(self, app: int, scope: str, body: JSON, command_id: str | None = None) -> JSON:
        command: JSON = {
            "id": command_id or str(self._fake._snowflake()),
            "application_id": str(app),
            "version": str(self._fake._snowflake()),
            "type": body.get("type", 1),
            "name": body["name"],
            "description": body.get("description", ""),
            "default_member_permissions": None,
            "nsfw": False,
            "contexts": None,
            "integration_types": [0],
        }
        if body.get("options"):
            command["options"] = body["options"]
        if body.get("description_localizations"):
            command["description_localizations"] = body["description_localizations"]
        if scope.startswith("guild:"):
            command["guild_id"] = scope.removeprefix("guild:")
        return command

    # ------------------------------------------------------------------ interactions

    async def invoke(
        self,
        channel_id: int,
        user: FakeUser,
        name: str,
        options: list[JSON] | None = None,
        *,
        interaction_type: int = 2,
        again: FakeInteraction | None = None,
        locale: str = "en-US",
    ) -> FakeInteraction:
        """``user`` runs ``/name`` with ``options`` in a channel, thread or DM
        (``INTERACTION_CREATE``), their Discord language ``locale``; ``again``: that
        interaction delivered a second time."""
        fake = self._fake
        if again is not None:
            await fake.dispatch("INTERACTION_CREATE", again.payload)
            return again
        interaction_id = fake._snowflake()
        token = f"interaction-token-{next(self._tokens)}"
        channel = fake._channel_payload(channel_id)
        assert channel is not None, "no such channel"
        data: JSON = {"id": str(fake._snowflake()), "name": name, "type": 1}
        if options:
            data["options"] = options
        payload: JSON = {
            "id": str(interaction_id),
            "application_id": str(fake.application_id),
            "type": interaction_type,
            "data": data,
            "token": token,
            "version": 1,
            "channel_id": str(channel_id),
            "channel": channel,
            "locale": locale,
            "app_permissions": "0",
            "attachment_size_limit": 10 * 1024 * 1024,
            "entitlements": [],
            "authorizing_integration_owners": {},
        }
        guild = fake._guild_of(channel_id)
        if guild is not None:
            payload["guild_id"] = str(guild.id)
            payload["guild_locale"] = "en-US"
            payload["member"] = {**fake._member(user, guild), "permissions": "0"}
            payload["context"] = 0
        else:
            payload["user"] = user.payload()
            payload["context"] = 1
        interaction = FakeInteraction(interaction_id, token, channel_id, user, payload)
        self.interactions[interaction_id] = interaction
        await fake.dispatch("INTERACTION_CREATE", payload)
        return interaction

    async def autocomplete(
        self, channel_id: int, user: FakeUser, name: str, options: list[JSON]
    ) -> FakeInteraction:
        """``user`` types into an option marked ``focused``: an autocomplete interaction."""
        return await self.invoke(channel_id, user, name, options, interaction_type=4)

    def answers_to(self, interaction: FakeInteraction) -> list[Answer]:
        """The answers to one interaction, in order."""
        return [a for a in self.answers if a.interaction == interaction.id]

    async def wait_answers(
        self, interaction: FakeInteraction, count: int = 1, within: float = 10.0
    ) -> list[Answer]:
        """Wait until an interaction has ``count`` answers."""
        await self._fake.wait_for(lambda: len(self.answers_to(interaction)) >= count, within)
        return self.answers_to(interaction)

    # ------------------------------------------------------------------ routes

    def add_routes(self, router: web.UrlDispatcher, api: str) -> None:
        """The command and interaction routes (before the fake's catch-all)."""
        for base in (
            api + "/applications/{app:\\d+}/commands",
            api + "/applications/{app:\\d+}/guilds/{guild:\\d+}/commands",
        ):
            router.add_get(base, self._list)
            router.add_post(base, self._upsert)
            router.add_put(base, self._bulk)
            router.add_patch(base + "/{command:\\d+}", self._edit)
            router.add_delete(base + "/{command:\\d+}", self._delete)
        router.add_post(api + "/interactions/{id:\\d+}/{token}/callback", self._callback)
        original = api + "/webhooks/{app:\\d+}/{token}/messages/@original"
        router.add_patch(original, self._edit_original)
        router.add_delete(original, self._delete_original)

    def throttle_next_write(self, retry_after: float = 0.05) -> None:
        """The next command write is answered 429 with ``retry_after`` (changing nothing)."""
        self.throttled.append(retry_after)

    def _scope_of(self, request: web.Request) -> tuple[int, str] | web.Response:
        if not self._fake._authorized(request):
            return _error(401, "401: Unauthorized")
        if request.method != "GET" and self.throttled:
            retry_after = self.throttled.pop(0)
            self.writes.append(Write(request.method, "throttled", "", 429))
            body = {"message": "You are being rate limited.", "retry_after": retry_after}
            response = _json({**body, "global": False}, 429)
            response.headers.update({"Via": "1.1 google", "Retry-After": "1"})
            return response
        app = int(request.match_info["app"])
        guild = request.match_info.get("guild")
        if app != self._fake.application_id:
            return _error(403, "Missing Access", 50001)
        if guild is not None and int(guild) in self.denied_guilds:
            return _error(403, "Missing Access", 50001)
        return app, "global" if guild is None else f"guild:{guild}"

    async def _list(self, request: web.Request) -> web.Response:
        scope = self._scope_of(request)
        if isinstance(scope, web.Response):
            return scope
        listed = list(self.commands.get(scope, {}).values())
        if request.query.get("with_localizations") != "true":
            # As Discord: without the flag, localization dictionaries are left out.
            listed = [_without_localizations(c) for c in listed]
        return _json(listed)

    def _invalid(self, body: JSON) -> bool:
        name, description = body.get("name"), body.get("description")
        options = body.get("options") or []
        return (
            not isinstance(name, str)
            or not _NAME.match(name)
            or not isinstance(description, str)
            or not 1 <= len(description) <= 100
            or len(options) > 25
        )

    async def _upsert(self, request: web.Request) -> web.Response:
        scope = self._scope_of(request)
        if isinstance(scope, web.Response):
            return scope
        body = await json_body(request)
        if self._invalid(body):
            self.writes.append(Write("POST", scope[1], str(body.get("name")), 400))
            return _error(400, "Invalid Form Body", 50035)
        commands = self.commands.setdefault(scope, {})
        same = next((c for c in commands.values() if c["name"] == body["name"]), None)
        command = self._command(scope[0], scope[1], body, same["id"] if same else None)
        commands[command["id"]] = command
        status = 200 if same else 201
        self.writes.append(Write("POST", scope[1], body["name"], status))
        return _json(command, status)

    async def _bulk(self, request: web.Request) -> web.Response:
        self.bulk_overwrites.append(request.path)
        return _error(405, "bulk overwrite refused by the fake: it would delete others' commands")

    async def _edit(self, request: web.Request) -> web.Response:
        scope = self._scope_of(request)
        if isinstance(scope, web.Response):
            return scope
        commands = self.commands.get(scope, {})
        found = commands.get(request.match_info["command"])
        if found is None:
            return _error(404, "Unknown application command", 10063)
        body = await json_body(request)
        merged = {**found, **body}
        if self._invalid(merged):
            return _error(400, "Invalid Form Body", 50035)
        commands[found["id"]] = self._command(scope[0], scope[1], merged, found["id"])
        self.writes.append(Write("PATCH", scope[1], merged["name"], 200))
        return _json(commands[found["id"]])

    async def _delete(self, request: web.Request) -> web.Response:
        scope = self._scope_of(request)
        if isinstance(scope, web.Response):
            return scope
        found = self.commands.get(scope, {}).pop(request.match_info["command"], None)
        if found is None:
            return _error(404, "Unknown application command", 10063)
        self.writes.append(Write("DELETE", scope[1], found["name"], 204))
        return web.Response(status=204)

    # ------------------------------------------------------------------ answers

    def _interaction(self, token: str) -> FakeInteraction | None:
        return next((i for i in self.interactions.values() if i.token == token), None)

    async def _record(self, answer: Answer) -> None:
        self.answers.append(answer)
        await self._fake._notify()

    async def _callback(self, request: web.Request) -> web.Response:
        interaction = self.interactions.get(int(request.match_info["id"]))
        if interaction is None or interaction.token != request.match_info["token"]:
            return _error(404, "Unknown interaction", 10062)
        body = await json_body(request)
        if interaction.responded:
            return _error(400, "Interaction has already been acknowledged.", 40060)
        interaction.responded = True
        kind = body.get("type")
        data = body.get("data") or {}
        ephemeral = bool(int(data.get("flags") or 0) & EPHEMERAL)
        at = asyncio.get_running_loop().time()
        callback: JSON = {"id": str(interaction.id), "type": kind}
        if kind == 8:
            choices = tuple(data.get("choices") or [])
            await self._record(Answer(interaction.id, "autocomplete", choices=choices, at=at))
            return _json({"interaction": callback})
        if kind == 5:
            interaction.deferred_ephemeral = ephemeral
            await self._record(Answer(interaction.id, "deferred", ephemeral=ephemeral, at=at))
            callback.update(response_message_loading=True, response_message_ephemeral=ephemeral)
            return _json({"interaction": callback})
        if kind != 4:
            return _error(400, "Invalid Form Body", 50035)
        content = str(data.get("content") or "")
        if not content or len(content) > 2000:
            return _error(400, "Invalid Form Body", 50035)
        message = await self._post(interaction, content, ephemeral)
        await self._record(Answer(interaction.id, "message", content, ephemeral, body=data, at=at))
        callback.update(response_message_id=message["id"], response_message_ephemeral=ephemeral)
        return _json({"interaction": callback, "resource": {"type": 4, "message": message}})

    async def _post(self, interaction: FakeInteraction, content: str, ephemeral: bool) -> JSON:
        """The message an answer shows; a public one is the channel's (echoed), as Discord."""
        fake = self._fake
        message = fake._message(interaction.channel_id, fake.bot, content)
        message["flags"] = EPHEMERAL if ephemeral else 0
        message["application_id"] = str(fake.application_id)
        message["interaction_metadata"] = {
            "id": str(interaction.id),
            "type": 2,
            "user": interaction.user.payload(),
            "authorizing_integration_owners": {},
        }
        if not ephemeral:
            fake.messages.setdefault(interaction.channel_id, []).append(message)
            if fake._current is not None and not fake._current.closed:  # as a message send
                await fake.dispatch("MESSAGE_CREATE", message)
        return message

    async def _edit_original(self, request: web.Request) -> web.Response:
        interaction = self._interaction(request.match_info["token"])
        if interaction is None or not interaction.responded:
            return _error(404, "Unknown Webhook", 10015)
        body = await json_body(request)
        content = str(body.get("content") or "")
        ephemeral = interaction.deferred_ephemeral
        message = await self._post(interaction, content, ephemeral)
        at = asyncio.get_running_loop().time()
        await self._record(Answer(interaction.id, "edit", content, ephemeral, body=body, at=at))
        return _json(message)

    async def _delete_original(self, request: web.Request) -> web.Response:
        interaction = self._interaction(request.match_info["token"])
        if interaction is None or not interaction.responded:
            return _error(404, "Unknown Webhook", 10015)
        at = asyncio.get_running_loop().time()
        await self._record(Answer(interaction.id, "delete", at=at))
        return web.Response(status=204)

    async def followup(self, token: str, body: JSON) -> web.Response:
        """``POST /webhooks/{app}/{token}``: a followup message of an interaction."""
        interaction = self._interaction(token)
        if interaction is None or not interaction.responded:
            return _error(404, "Unknown Webhook", 10015)
        content = str(body.get("content") or "")
        if not content or len(content) > 2000:
            return _error(400, "Invalid Form Body", 50035)
        ephemeral = bool(int(body.get("flags") or 0) & EPHEMERAL)
        message = await self._post(interaction, content, ephemeral)
        interaction.followups += 1
        at = asyncio.get_running_loop().time()
        await self._record(Answer(interaction.id, "followup", content, ephemeral, body=body, at=at))
        return _json(message)


def _without_localizations(data: JSON) -> JSON:
    """A command (or option) as listed without ``with_localizations``."""
    out = {k: v for k, v in data.items() if k != "description_localizations"}
    if isinstance(out.get("options"), list):
        out["options"] = [_without_localizations(o) for o in out["options"]]
    return out
