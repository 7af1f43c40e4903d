"""Credentials that hide in configuration values: find them, mask them.

A URL may carry a password in its user-info (``postgresql://bot:pw@db``, ``https://u:pw@proxy``)
or in its query string (``postgresql://bot@db/pb?password=pw``); a value meant to name an
environment variable may hold the token itself. Nothing here imports the rest of personabot.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote, urlsplit, urlunsplit

MASK: Final = "***"
#: Query parameters that carry credentials (compared case-insensitively).
SECRET_PARAMS: Final = frozenset(
    {
        "access_token",
        "api_key",
        "apikey",
        "auth",
        "key",
        "pass",
        "passwd",
        "password",
        "pwd",
        "secret",
        "sslpassword",
        "token",
    }
)
_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Schemes whose user-info without a password is a plain user name (not a credential).
_USER_NAME_SCHEMES: Final = frozenset({"postgresql", "postgres"})


def _query_parts(query: str) -> list[tuple[str, str | None]]:
    """``a=1&b`` -> [("a", "1"), ("b", None)], raw (undecoded)."""
    parts: list[tuple[str, str | None]] = []
    for piece in query.split("&"):
        name, eq, value = piece.partition("=")
        parts.append((name, value if eq else None))
    return parts


#: Parts of a query parameter's name that mark it as a credential (``bot_token``,
#: ``client_secret``, ``X-Api-Key``, ``access-token``, ``sig``...), matched after
#: lower-casing and turning ``-`` into ``_``. Masking a harmless value is cheap; printing a
#: credential is not, so the match is broad.
_SECRET_NAME_PARTS: Final = ("token", "secret", "pass", "pwd", "key", "auth", "credential")
_SECRET_NAME_WORDS: Final = frozenset({"sig", "signature", "code"})


def _secret_param(name: str) -> bool:
    normal = unquote(name).strip().lower().replace("-", "_")
    if normal in SECRET_PARAMS or any(part in normal for part in _SECRET_NAME_PARTS):
        return True
    return any(word in _SECRET_NAME_WORDS for word in normal.split("_"))


def url_secrets(url: str) -> list[str]:
    """The credentials a URL carries (raw and percent-decoded), longest first."""
    found: set[str] = set()
    try:
        parts = urlsplit(url.strip())
        password = parts.password
        username = parts.username
    except ValueError:
        return []
    if password:
        found.add(password)
    if username and parts.scheme.lower() not in _USER_NAME_SCHEMES and password is None:
        found.add(username)  # https://TOKEN@host: the user name is the credential
    for name, value in _query_parts(parts.query):
        if value and _secret_param(name):
            found.add(value)
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if s), key=len, reverse=True)


def redact_url(url: str) -> str:
    """The URL with every credential replaced by ``***``: safe to show and log."""
    try:
        parts = urlsplit(url.strip())
        password = parts.password
        username = parts.username
    except ValueError:
        return url.split(":", 1)[0] + "://..."
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        if password is not None:
            netloc = f"{user}:{MASK}@{hostinfo}"
        elif username and parts.scheme.lower() not in _USER_NAME_SCHEMES:
            netloc = f"{MASK}@{hostinfo}"
    query = "&".join(
        name if value is None else f"{name}={MASK if value and _secret_param(name) else value}"
        for name, value in _query_parts(parts.query)
    )
    if netloc == parts.netloc and query == parts.query:
        return url  # nothing to mask (and urlunsplit would rewrite sqlite:/// URLs)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def looks_like_env_name(value: str) -> bool:
    """Whether ``value`` can be an environment variable's name (and not a pasted token)."""
    if not _ENV_NAME.match(value):
        return False  # tokens have ':' (Telegram), '.' (Discord), '-' (API keys)...
    if len(value) < 20:
        return True
    # A long name without a word separator, or mixing cases and digits, is a random secret.
    classes = sum(bool(re.search(p, value)) for p in ("[a-z]", "[A-Z]", "[0-9]"))
    return "_" in value and classes < 3
