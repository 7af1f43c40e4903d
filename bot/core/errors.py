"""The personabot error tree. Every error the framework raises derives from PersonabotError.

::

    PersonabotError
    ├── ConfigError            bad configuration (names the key path and the problem)
    ├── CardError              a Character Card that cannot be imported or exported
    ├── StoreError             the store failed or its schema is too new
    ├── ModelError             the language model failed
    │   ├── ModelUnavailable   transient: overloaded, 5xx, timeout, connection (retry later)
    │   │   └── RateLimited    429, with ``retry_after`` seconds when the provider said so
    │   └── ModelRejected      permanent: authentication, permission, unknown model
    │       └── RequestRejected  this request can never succeed (400 bad request, 413 too
    │                            large): the turn is closed out, other requests may succeed
    ├── ListenError            a port to serve on cannot be bound (taken, not allowed)
    ├── PluginError            a plugin's resource failed to open at start (its lifespan)
    ├── SpeechFailed           text-to-speech gave no usable audio (the reply goes as text)
    ├── AdapterError           a platform adapter failed to deliver
    │   └── DeliveryRefused    the platform will never deliver there (bot blocked, chat gone)
    └── SelfCancelled          a plugin's code raised CancelledError though nobody cancelled it

Third-party exceptions are translated once, at the boundary that calls the library, with
``raise ... from exc``. Messages never contain secrets.
"""

from __future__ import annotations


class PersonabotError(Exception):
    """Root of every error personabot raises."""


class ConfigError(PersonabotError):
    """The configuration is invalid; ``problems`` lists ``key.path: problem`` lines."""

    def __init__(
        self,
        problems: list[str],
        *,
        source: str | None = None,
        sources: list[str | None] | None = None,
    ) -> None:
        self.problems = tuple(problems)
        self.source = source
        # Where each problem came from, when not ``source`` (a PERSONABOT_... variable).
        self.sources = tuple(sources or [None] * len(self.problems))
        prefix = f"{source}: " if source and not sources else ""
        super().__init__(prefix + "; ".join(self.lines() if sources else self.problems))

    def lines(self) -> list[str]:
        """One line per problem, each naming its source: what an operator reads, so that
        five typos are five lines of one run, not one line of five."""
        out = []
        for problem, own in zip(self.problems, self.sources, strict=True):
            where = self.source if own is None else own  # "": names its own source
            out.append(f"{where}: {problem}" if where else problem)
        return out or [str(self)]


class PluginError(PersonabotError):
    """A plugin's lifespan failed to start: one line naming the plugin (bot/app/lifespans.py);
    what the plugins opened before it is closed again."""


class CardError(PersonabotError):
    """A Character Card could not be read, imported or exported (container, size, base64,
    JSON, spec, missing name): one line saying which, and nothing was written."""


class StoreError(PersonabotError):
    """The store failed (I/O, schema, constraint that should never break)."""


class ModelError(PersonabotError):
    """The language model call failed."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class ModelUnavailable(ModelError):
    """A transient model failure after the SDK's own retries: try again later."""


class RateLimited(ModelUnavailable):
    """The provider rate-limited us; ``retry_after`` is in seconds when known."""

    def __init__(
        self, message: str, *, status: int | None = 429, retry_after: float | None = None
    ) -> None:
        self.retry_after = retry_after
        super().__init__(message, status=status)


class ModelRejected(ModelError):
    """A permanent model failure (bad request, authentication): retrying will not help."""


class RequestRejected(ModelRejected):
    """The provider refused this request itself (e.g. "prompt is too long", an empty
    message): sending it again fails again, but the next, different request may succeed."""


class ListenError(PersonabotError):
    """A port ``personabot`` serves on (console, health) cannot be bound: one line naming the
    setting, the address and the reason, exit 1 (review 35a: a traceback before)."""


class SpeechFailed(PersonabotError):
    """Text-to-speech gave no usable audio: the server failed, refused, timed out or
    answered something that is not the format asked for (docs/voices.md); the reply goes
    out as text."""


class AdapterError(PersonabotError):
    """A platform adapter could not deliver a reply."""


class DeliveryRefused(AdapterError):
    """The platform refuses delivery for good (blocked by the user, kicked, chat deleted)."""


class PreviewThrottled(AdapterError):
    """The platform rate-limited a streamed preview (a draft or an edit): skip updates for
    ``retry_after`` seconds; the final message is never delayed by it."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class PreviewUnavailable(AdapterError):
    """This chat cannot show a streamed preview (e.g. a draft in a group): stop trying for
    this turn; the reply is delivered the usual way."""


class SelfCancelled(PersonabotError):
    """Plugin code raised ``CancelledError`` while its caller was not being cancelled.

    Passed on as is, it would look like a shutdown to the turn or the update loop above it
    (a turn retried silently, forever; an adapter's polling stopped), so it becomes a failure
    of that code like any other (bot.core.tasks.within)."""


class MediaError(PersonabotError):
    """A piece of media could not be fetched, read or transcribed."""


class MediaUnavailable(MediaError):
    """Fetching or transcribing failed for now (network, 5xx, timeout): may work later."""


class MediaRejected(MediaError):
    """This media can never be used (too large, unsupported format, gone from the platform)."""
