"""Who may use the console: the operator token, login sessions, CSRF tokens, login limits.

One operator token (``[web] token_env``, from the environment only) opens the console: in
the login form, which then sets a session cookie, or as ``Authorization: Bearer`` for the
JSON API. Tokens are compared in constant time (over their digests, so a length difference
says nothing either). A session is a random id known only to this process, with its own
CSRF token that every state-changing form must send back; both expire with the session.
Failed logins are limited per client address in a sliding minute, so the token cannot be
guessed at speed; a success clears that address's count.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import deque
from dataclasses import dataclass

#: Sessions one console keeps at most (the oldest go first): logins cannot grow memory.
MAX_SESSIONS = 1000
#: Addresses whose failures are remembered at most.
MAX_TRACKED = 10_000


def same_token(given: str, token: str) -> bool:
    """Whether ``given`` is the operator token, in constant time."""
    a = hashlib.sha256(given.encode("utf-8", "surrogatepass")).digest()
    b = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
    return hmac.compare_digest(a, b)


@dataclass(frozen=True, slots=True)
class Session:
    """A login: its CSRF token and when it ends."""

    csrf: str
    expires_at: float


class Sessions:
    """Login sessions of one console process."""

    def __init__(self, lifetime: float) -> None:
        self._lifetime = lifetime
        self._sessions: dict[str, Session] = {}

    def create(self, now: float) -> tuple[str, Session]:
        """A new session id and its session."""
        self._sessions = {k: s for k, s in self._sessions.items() if s.expires_at > now}
        while len(self._sessions) >= MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]
        sid = secrets.token_urlsafe(32)
        session = Session(csrf=secrets.token_urlsafe(32), expires_at=now + self._lifetime)
        self._sessions[sid] = session
        return sid, session

    def get(self, sid: str | None, now: float) -> Session | None:
        """The live session of this id, or None."""
        session = None if not sid else self._sessions.get(sid)
        if session is None or session.expires_at <= now:
            return None
        return session

    def drop(self, sid: str | None) -> None:
        """End a session (logout)."""
        if sid:
            self._sessions.pop(sid, None)


class LoginLimiter:
    """At most ``per_minute`` failed logins per client address in any 60 seconds."""

    def __init__(self, per_minute: int) -> None:
        self._per_minute = per_minute
        self._failures: dict[str, deque[float]] = {}

    def allowed(self, address: str, now: float) -> bool:
        """Whether this address may try now."""
        failures = self._failures.get(address)
        if failures is None:
            return True
        while failures and failures[0] <= now - 60.0:
            failures.popleft()
        return len(failures) < self._per_minute

    def failed(self, address: str, now: float) -> None:
        """Count a failed login."""
        if address not in self._failures and len(self._failures) >= MAX_TRACKED:
            del self._failures[next(iter(self._failures))]
        self._failures.setdefault(address, deque()).append(now)

    def succeeded(self, address: str) -> None:
        """A correct login clears the address's failures."""
        self._failures.pop(address, None)
