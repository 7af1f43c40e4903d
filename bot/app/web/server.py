"""The operator console: an aiohttp server of server-rendered pages and a JSON API
(docs/web.md).

Security, in the order a request meets it:

- every response carries a Content-Security-Policy that allows no inline script, no
  framing, forms posting only here; no page runs a script but the playground, which runs
  one file of ours (``/static/playground.js``: Enter sends the message) and nothing else;
- error pages (400, 403, 404, 500...) are drawn inside the layout, with the navigation
  when a session is open; ``/api/`` answers them as JSON;
- ``/login`` and ``/static`` are public; every other page needs the session cookie
  (HttpOnly, SameSite=Strict) and redirects to the login without it; every ``/api/`` route
  needs ``Authorization: Bearer <token>`` and answers 401 without it;
- every state-changing page request is a POST carrying the session's CSRF token;
- failed logins are limited per client address (auth.py);
- everything users wrote is rendered by Jinja2 with autoescaping on, so a display name or a
  message is always text, never markup.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import jinja2
from aiohttp import web

from bot.app.health import Site
from bot.app.web.auth import LoginLimiter, Session, Sessions, same_token
from bot.app.web.chart import chart
from bot.app.web.playground import Playground
from bot.app.web.views import ConsoleData, NotFound, Viewer
from bot.core.clock import Clock
from bot.core.events import UserKey

log = logging.getLogger("personabot.web")

COOKIE = "personabot_console"
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
#: The playground's policy: the same, and the one script file of ours (never inline).
PLAYGROUND_CSP = CSP + "; script-src 'self'"
#: The public files (no login needed): stylesheet and the playground's script.
STATIC = {"/static/console.css": "text/css", "/static/playground.js": "text/javascript"}
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_SESSION = web.RequestKey("console_session", Session)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str) -> bool:
    """Whether a listen host is this machine only (an address of the loopback range, or
    ``localhost``; a name like ``127.example.com`` is not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class WebConsole(Site):
    """The console on ``host:port``, for the operator holding ``token``."""

    setting = "web.listen"
    what = "operator console"
    log = log

    def __init__(
        self,
        data: ConsoleData,
        *,
        host: str,
        port: int,
        token: str,
        clock: Clock,
        session_hours: float = 12.0,
        login_attempts_per_minute: int = 5,
        playground: Playground | None = None,
    ) -> None:
        self._data = data
        self._playground = playground
        self._host = host
        self.port = port
        self._token = token
        self._clock = clock
        self._sessions = Sessions(session_hours * 3600.0)
        self._limiter = LoginLimiter(login_attempts_per_minute)
        self._runner: web.AppRunner | None = None
        self._templates = jinja2.Environment(
            loader=jinja2.PackageLoader("bot.app.web", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self._templates.filters["when"] = _when
        self._templates.filters["pretty"] = _pretty
        self._templates.filters["segment"] = _segment
        self._templates.filters["chart"] = chart

    # -- lifecycle --------------------------------------------------------------------------

    def application(self) -> web.Application:
        """The aiohttp application (routes and middleware)."""
        app = web.Application(middlewares=[self._headers, self._auth], client_max_size=64 * 1024)
        get, post = app.router.add_get, app.router.add_post
        get("/login", self._login_page)
        post("/login", self._login)
        post("/logout", self._logout)
        for path in STATIC:
            get(path, self._static)
        for path, view in (
            ("/", self._overview),
            ("/conversations", self._conversations),
            ("/conversations/{id:[0-9]+}", self._conversation),
            ("/people/{platform}/{user}", self._person),
            ("/retention", self._retention),
            ("/audit", self._audit),
        ):
            get(path, view)
            get("/api" + (path if path != "/" else "/overview"), view)
        get("/playground", self._playground_page)
        get("/api/playground", self._playground_page)
        post("/playground/{persona}", self._say)
        post("/api/playground/{persona}", self._say)
        post("/people/{platform}/{user}/forget-item", self._forget_item)
        post("/people/{platform}/{user}/forget", self._forget_all)
        post("/people/{platform}/{user}/export", self._export)
        for action in ("forget-item", "forget", "export"):
            post(f"/api/people/{{platform}}/{{user}}/{action}", self._api_action(action))
        return app

    # -- middleware ---------------------------------------------------------------------------

    @web.middleware
    async def _headers(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            # aiohttp's own answers (an unknown path, a wrong method): a bare "404: Not
            # Found" had no way back; redirects pass as they are.
            response = exc if exc.status < 400 else self._error(request, exc.status, _said(exc))
            if exc.status >= 400 and "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
        except NotFound as exc:
            response = self._error(request, 404, str(exc))
        except Exception:
            # A bug or a store failure: logged here, and the page still carries the
            # headers (aiohttp's own 500 would have none of them).
            log.exception("console: %s %s failed", request.method, request.path)
            response = self._error(request, 500, "Something went wrong; the log says what.")
        for name, value in _HEADERS.items():
            response.headers.setdefault(name, value)
        # How long the page took here (bench/web.py reads it; browsers show it).
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.2f}"
        if isinstance(response, web.HTTPException):
            raise response
        return response

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path == "/login" or path in STATIC:
            return await handler(request)
        if path.startswith("/api/"):
            header = request.headers.get("Authorization", "")
            scheme, _, given = header.partition(" ")
            if scheme.lower() != "bearer" or not same_token(given.strip(), self._token):
                return web.json_response(
                    {"error": "unauthorized"},
                    status=401,
                    headers={"WWW-Authenticate": 'Bearer realm="personabot"'},
                )
            return await handler(request)
        session = self._sessions.get(request.cookies.get(COOKIE), self._clock.now())
        if session is None:
            if request.method == "GET":
                target = urllib.parse.quote(request.path_qs, safe="")
                raise web.HTTPSeeOther(f"/login?next={target}")
            return self._error(request, 401, "Log in first.")
        if request.method == "POST":
            form = await request.post()
            if not same_token(str(form.get("csrf", "")), session.csrf):
                log.warning("console: a POST to %s without its CSRF token refused", path)
                return self._error(request, 403, "This form has expired; open the page again.")
        request[_SESSION] = session
        return await handler(request)

    # -- login ----------------------------------------------------------------------------------

    async def _login_page(self, request: web.Request) -> web.Response:
        return self._page("login.html", {"next": _next(request), "problem": None}, None)

    async def _login(self, request: web.Request) -> web.StreamResponse:
        # The form is read first: between the limiter's check and its count of a failure
        # nothing may await, or many requests with slow bodies would all pass the check.
        form = await request.post()
        now = self._clock.now()
        address = request.remote or "?"
        if not self._limiter.allowed(address, now):
            log.warning("console: logins from %s refused for a minute (too many failures)", address)
            return self._page(
                "login.html",
                {"next": "/", "problem": "Too many failed logins: wait a minute."},
                None,
                status=429,
            )
        if not same_token(str(form.get("token", "")), self._token):
            self._limiter.failed(address, now)
            log.warning("console: failed login from %s", address)
            return self._page(
                "login.html", {"next": _next(request), "problem": "Wrong token."}, None, status=401
            )
        self._limiter.succeeded(address)
        sid, _ = self._sessions.create(now)
        response = web.HTTPSeeOther(_next(request, str(form.get("next", "/"))))
        response.set_cookie(
            COOKIE,
            sid,
            httponly=True,
            samesite="Strict",
            secure=_https(request),
            path="/",
        )
        raise response

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        self._sessions.drop(request.cookies.get(COOKIE))
        response = web.HTTPSeeOther("/login")
        response.del_cookie(COOKIE, path="/")
        raise response

    async def _static(self, request: web.Request) -> web.Response:
        name = request.path.removeprefix("/static/")
        text = resources.files("bot.app.web").joinpath("static", name).read_text()
        return web.Response(text=text, content_type=STATIC[request.path])

    # -- views --------------------------------------------------------------------------------

    async def _overview(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, "overview.html", await self._data.overview())

    async def _conversations(self, request: web.Request) -> web.StreamResponse:
        data = await self._data.conversations(
            request.query.get("q", ""), request.query.get("after", "")
        )
        return await self._answer(request, "conversations.html", data)

    async def _conversation(self, request: web.Request) -> web.StreamResponse:
        conversation = _number(request.match_info["id"])
        if conversation is None:
            raise NotFound(f"no conversation {request.match_info['id'][:40]}")
        data = await self._data.conversation(
            conversation,
            _number(request.query.get("session", "")),
            self._viewer(request),
            before_turn=_number(request.query.get("before", "")),
        )
        return await self._answer(request, "conversation.html", data)

    async def _person(self, request: web.Request) -> web.StreamResponse:
        data = await self._data.person(_user(request), self._viewer(request))
        return await self._answer(request, "person.html", data)

    async def _retention(self, request: web.Request) -> web.StreamResponse:
        after = _number(request.query.get("after", "")) or 0
        data = await self._data.retention(after)
        return await self._answer(request, "retention.html", data)

    async def _audit(self, request: web.Request) -> web.StreamResponse:
        data = await self._data.audit(_number(request.query.get("before", "")))
        return await self._answer(request, "audit.html", data)

    # -- the playground -------------------------------------------------------------------------

    async def _playground_page(self, request: web.Request) -> web.StreamResponse:
        if self._playground is None:
            raise NotFound("the playground runs inside personabot run and personabot web")
        personas = self._playground.personas
        wanted = request.query.get("persona", personas[0].id)
        if wanted not in {p.id for p in personas}:
            raise NotFound(f"no persona {wanted!r}")
        chat = await self._playground.chat(wanted)
        data = {
            "personas": [{"id": p.id, "name": p.name} for p in personas],
            "persona": wanted,
            "name": chat.persona.name,
            "greeting": chat.greeting,
            "session": chat.session,
            "waiting": chat.waiting,
            "transcript": [
                {
                    "role": m.role,
                    "speaker": chat.persona.name if m.role == "assistant" else "you",
                    "text": m.text,
                    "at": m.created_at,
                    "turn": m.turn,
                }
                for m in chat.messages
            ],
        }
        response = await self._answer(request, "playground.html", data)
        response.headers["Content-Security-Policy"] = PLAYGROUND_CSP
        return response

    async def _say(self, request: web.Request) -> web.StreamResponse:
        if self._playground is None:
            raise NotFound("no playground here")
        persona = request.match_info["persona"]
        if persona not in {p.id for p in self._playground.personas}:
            raise NotFound(f"no persona {persona!r}")
        if request.path.startswith("/api/"):
            try:
                body = await request.json()
            except ValueError:
                body = None
            text = body.get("text") if isinstance(body, dict) else None
        else:
            text = (await request.post()).get("text")
        if not isinstance(text, str) or not text.strip():
            return self._error(request, 400, "Write something first.")
        await self._playground.say(persona, text[:8000])
        if request.path.startswith("/api/"):
            return web.json_response({"accepted": True})
        raise web.HTTPSeeOther(f"/playground?persona={urllib.parse.quote(persona)}")

    # -- actions (POST, CSRF-checked above) ----------------------------------------------------

    async def _forget_item(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        user = _user(request)
        await self._data.forget_item(
            user,
            str(form.get("section", "")),
            str(form.get("field", "")),
            str(form.get("value", "")),
            self._viewer(request),
        )
        raise web.HTTPSeeOther(_person_path(user))

    async def _forget_all(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        user = _user(request)
        if form.get("confirm") != "yes":
            return self._error(request, 400, "Tick the box to confirm: this cannot be undone.")
        await self._data.forget_all(user, self._viewer(request))
        raise web.HTTPSeeOther(_person_path(user))

    async def _export(self, request: web.Request) -> web.StreamResponse:
        user = _user(request)
        document = await self._data.export(user, self._viewer(request))
        name = f"personabot-export-{_safe(user.platform)}-{_safe(user.user_id)}.json"
        text = await asyncio.to_thread(json.dumps, document, ensure_ascii=False, indent=1)
        return web.Response(
            text=text,
            content_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    def _api_action(self, action: str) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            user = _user(request)
            viewer = self._viewer(request, actor="api")
            try:
                body = await request.json() if request.can_read_body else {}
            except ValueError:
                return web.json_response({"error": "the body is not JSON"}, status=400)
            if not isinstance(body, dict):
                return web.json_response({"error": "the body is not an object"}, status=400)
            if action == "forget-item":
                done = await self._data.forget_item(
                    user,
                    str(body.get("section", "")),
                    str(body.get("field", "")),
                    str(body.get("value", "")),
                    viewer,
                )
                return web.json_response({"forgotten": done})
            if action == "forget":
                if body.get("confirm") is not True:
                    return web.json_response({"error": 'send {"confirm": true}'}, status=400)
                return web.json_response(await self._data.forget_all(user, viewer))
            return web.json_response(await self._data.export(user, viewer))

        return handle

    # -- rendering ------------------------------------------------------------------------------

    def _viewer(self, request: web.Request, actor: str | None = None) -> Viewer:
        if actor is None:
            actor = "api" if request.path.startswith("/api/") else "operator"
        return Viewer(actor=actor, address=request.remote or "?")

    async def _answer(
        self, request: web.Request, template: str, data: dict[str, Any]
    ) -> web.Response:
        """The page, or its JSON, rendered in a worker thread: the console shares the event
        loop with every bot of ``personabot run``, and a page of a big conversation took
        seconds to render there, holding every chat (issue 34; docs/web.md#performance)."""
        if request.path.startswith("/api/"):
            text = await asyncio.to_thread(json.dumps, data, ensure_ascii=False)
            return web.Response(text=text, content_type="application/json")
        session = request[_SESSION]
        return await asyncio.to_thread(self._page, template, data, session)

    def _page(
        self,
        template: str,
        data: dict[str, Any],
        session: Session | None,
        status: int = 200,
    ) -> web.Response:
        html = self._templates.get_template(template).render(
            data=data, csrf=None if session is None else session.csrf
        )
        return web.Response(text=html, content_type="text/html", status=status)

    def _error(self, request: web.Request, status: int, message: str) -> web.Response:
        """An error as JSON under ``/api/``, else a page of the layout (with the navigation
        when the request has a session: the operator is one click from anywhere)."""
        if request.path.startswith("/api/"):
            return web.json_response({"error": message}, status=status)
        session = request.get(_SESSION)
        return self._page(
            "error.html", {"status": status, "message": message}, session, status=status
        )


def _said(exc: web.HTTPException) -> str:
    """What an aiohttp error says to the operator."""
    if exc.status == 404:
        return "There is no such page."
    if exc.status == 405:
        return "This page does not take that kind of request."
    return exc.reason


def _number(text: str) -> int | None:
    """A row id or session number from a URL (ASCII digits, within SQL's 64-bit
    integers), or None: ``"²".isdigit()`` holds and a huge one overflows the driver."""
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        return None
    return int(text)


def _user(request: web.Request) -> UserKey:
    return UserKey(request.match_info["platform"], request.match_info["user"])


def _person_path(user: UserKey) -> str:
    quote = urllib.parse.quote
    return f"/people/{quote(user.platform, safe='')}/{quote(user.user_id, safe='')}"


def _next(request: web.Request, given: str | None = None) -> str:
    """Where to go after the login: a path of this console only (never another site)."""
    target = given if given is not None else request.query.get("next", "/")
    # Browsers drop tabs and newlines from a URL ("/\t/evil" is "//evil", another host),
    # so no control character or space may be in it at all.
    if (
        not target.startswith("/")
        or target.startswith("//")
        or "\\" in target
        or any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in target)
    ):
        return "/"
    return target


def _https(request: web.Request) -> bool:
    return request.secure or request.headers.get("X-Forwarded-Proto", "") == "https"


def _segment(text: str) -> str:
    """``text`` as one path segment of a URL (a ``/`` or ``?`` in a user id stays in it)."""
    return urllib.parse.quote(str(text), safe="")


def _safe(text: str) -> str:
    return "".join(ch for ch in text if ch.isalnum() or ch in "-_")[:64] or "user"


def _when(instant: float | None) -> str:
    if instant is None:
        return "-"
    return datetime.fromtimestamp(float(instant), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _pretty(body: str | None) -> str:
    """A JSON body indented (or as it is when it is not JSON)."""
    if body is None:
        return ""
    try:
        return json.dumps(json.loads(body), ensure_ascii=False, indent=1)
    except ValueError:
        return body
