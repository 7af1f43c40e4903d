"""Voice notes to text through an OpenAI-compatible ``POST {base_url}/audio/transcriptions``.

One implementation of the ``Transcriber`` port (bot/core/media.py): the hosted OpenAI API or a
self-hosted whisper server (speaches / faster-whisper-server, whisper.cpp's server, LocalAI) all
speak this multipart form. aiohttp errors and HTTP statuses are translated once, here:

* 408, 425, 429, 5xx, timeouts, connection errors, unreadable answers -> ``MediaUnavailable``
  (429 as ``TranscriptionRateLimited`` with the server's ``Retry-After``);
* every other 4xx and redirects, empty or too large audio -> ``MediaRejected``.

No retries here: the caller decides what a transient failure means for its turn. Error texts
name the status and the server's message (cut to 200 characters), never the API key, even when
a server echoes the ``Authorization`` header back. Operator guide: docs/transcription.md.
"""

from __future__ import annotations

import email.utils
import json
import logging
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final

import aiohttp

from bot.core.errors import ConfigError, MediaError, MediaRejected, MediaUnavailable
from bot.llm.audio_http import MAX_DETAIL, endpoint, error_detail, redacted

__all__ = [
    "DEFAULT_MAX_BYTES",
    "OpenAITranscriber",
    "TranscriptionRateLimited",
    "TranscriptionSettings",
    "transcriber_from",
]

log = logging.getLogger("personabot.transcription")

#: OpenAI's upload limit (25 MB); self-hosted servers are often more generous.
DEFAULT_MAX_BYTES: Final = 25 * 1024 * 1024
#: A transcript of the largest upload is a few hundred kB: more is not a transcript.
_MAX_RESPONSE_BYTES: Final = 4 * 1024 * 1024
_TRANSIENT_4XX: Final = frozenset({408, 425, 429})
#: Servers (OpenAI first) pick the decoder from the file name's extension, so a name without
#: one gets it from the media type; Telegram voice notes are ``audio/ogg`` (Opus).
_EXTENSIONS: Final = {
    "audio/ogg": ".ogg",
    "audio/opus": ".opus",
    "audio/mpeg": ".mp3",
    "audio/mp3": ".mp3",
    "audio/mp4": ".m4a",
    "audio/m4a": ".m4a",
    "audio/x-m4a": ".m4a",
    "audio/aac": ".m4a",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/wave": ".wav",
    "audio/flac": ".flac",
    "audio/x-flac": ".flac",
    "audio/webm": ".webm",
    "video/webm": ".webm",
    "video/mp4": ".mp4",
    "video/mpeg": ".mpeg",
}


class TranscriptionRateLimited(MediaUnavailable):
    """The server answered 429; ``retry_after`` is its ``Retry-After`` in seconds, if any."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class TranscriptionSettings:
    """The ``[transcription]`` table of personabot.toml (no secrets: the key comes apart)."""

    url: str  # base URL up to and including the version, e.g. ``http://127.0.0.1:8000/v1``
    model: str  # ``whisper-1``, ``Systran/faster-whisper-small``, ...
    #: Name of the environment variable holding the API key (None: the server needs none).
    api_key_env: str | None = None
    language: str | None = None  # ISO-639-1 hint (``en``); None lets the server detect it
    prompt: str | None = None  # vocabulary hint: names, jargon
    timeout_seconds: float = 60.0  # the whole request: upload, transcription, answer
    #: Voice notes longer than this are not sent at all (cost bound; the caller checks it
    #: against ``MediaRef.duration``, which the transcriber does not know).
    max_seconds: float = 300.0
    max_bytes: int = DEFAULT_MAX_BYTES


def transcriber_from(settings: TranscriptionSettings, api_key: str | None) -> OpenAITranscriber:
    """The transcriber the settings describe; ``api_key`` read from ``settings.api_key_env``."""
    return OpenAITranscriber(
        settings.url,
        model=settings.model,
        api_key=api_key,
        language=settings.language,
        prompt=settings.prompt,
        timeout_seconds=settings.timeout_seconds,
        max_bytes=settings.max_bytes,
    )


class OpenAITranscriber:
    """A ``Transcriber`` speaking OpenAI's ``/audio/transcriptions``; ``aclose()`` when done.

    ``session``: an aiohttp session to use and leave open (tests, a shared pool); without one
    the transcriber opens its own on first use and closes it in ``aclose()``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None,
        language: str | None = None,
        prompt: str | None = None,
        timeout_seconds: float = 60.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self._url = endpoint(base_url, key="transcription.url", path="audio/transcriptions")
        problems = []
        if not model.strip():
            problems.append("transcription.model: empty")
        if not timeout_seconds > 0:
            problems.append(f"transcription.timeout_seconds: {timeout_seconds} is not positive")
        if max_bytes <= 0:
            problems.append(f"transcription.max_bytes: {max_bytes} is not positive")
        if problems:
            raise ConfigError(problems)
        self._model = model
        self._api_key = api_key.strip() if api_key and api_key.strip() else None
        self._language = language or None
        self._prompt = prompt or None
        self._timeout = timeout_seconds
        self._max_bytes = max_bytes
        self._session = session
        self._owns_session = session is None
        self._closed = False

    async def transcribe(self, audio: bytes, *, filename: str, media_type: str) -> str:
        """The transcript, stripped ("" when the server heard nothing)."""
        if self._closed:
            raise MediaUnavailable("the transcriber is closed (shutting down)")
        if not audio:
            raise MediaRejected("the voice note is empty (0 bytes)")
        if len(audio) > self._max_bytes:
            raise MediaRejected(
                f"the voice note is {len(audio)} bytes, more than the transcription limit of "
                f"{self._max_bytes} bytes"
            )
        media_type = media_type or "application/octet-stream"
        form = aiohttp.FormData()
        form.add_field(
            "file", audio, filename=_filename(filename, media_type), content_type=media_type
        )
        form.add_field("model", self._model)
        form.add_field("response_format", "json")
        if self._language:
            form.add_field("language", self._language)
        if self._prompt:
            form.add_field("prompt", self._prompt)
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        log.debug("transcribing %d bytes (%s) with %s", len(audio), media_type, self._model)
        try:
            text = await self._post(form, headers)
        except MediaError as exc:
            log.warning("transcription failed: %s", exc)
            raise
        log.debug("transcribed %d bytes into %d characters", len(audio), len(text))
        return text

    async def aclose(self) -> None:
        """Close the session if this transcriber opened it; later calls fail as unavailable."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None and self._owns_session:
            await session.close()

    async def __aenter__(self) -> OpenAITranscriber:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _post(self, form: aiohttp.FormData, headers: dict[str, str]) -> str:
        if self._session is None:
            # No await between the check and the assignment: concurrent first calls share one.
            self._session = aiohttp.ClientSession()
        where = f"{self._url.host}:{self._url.port}"
        try:
            async with self._session.post(
                self._url,
                data=form,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                # A redirect is a wrong ``url``; following it would send the audio elsewhere.
                allow_redirects=False,
            ) as response:
                body = await _read_bounded(response)
                if not 200 <= response.status < 300:
                    raise self._status_error(response, body)
                return self._transcript(response, body)
        except TimeoutError:
            raise MediaUnavailable(
                f"the transcription server at {where} did not answer within "
                f"{self._timeout:g} s (timeout)"
            ) from None
        except aiohttp.ClientResponseError as exc:
            # Its repr carries the request headers, so the Authorization header: not chained.
            raise MediaUnavailable(
                f"transcription at {where} failed: {type(exc).__name__} {exc.status}"
            ) from None
        except aiohttp.ClientError as exc:
            raise MediaUnavailable(
                f"could not reach the transcription server at {where} ({type(exc).__name__})"
            ) from exc

    def _transcript(self, response: aiohttp.ClientResponse, body: bytes) -> str:
        """``{"text": ...}``, or a plain-text body from a server that ignored the format."""
        kind = response.content_type
        if kind == "text/html":
            raise MediaUnavailable(
                "the transcription server answered an HTML page instead of a transcript "
                "(a proxy, or a wrong transcription.url?)"
            )
        text = _decode(body, response.charset).strip()
        if kind != "application/json" and not text.startswith("{"):
            return text
        try:
            data = json.loads(text)
        except ValueError:
            if kind == "application/json":
                raise MediaUnavailable(
                    "the transcription server answered unreadable JSON"
                ) from None
            return text  # a plain transcript that happens to start with a brace
        if isinstance(data, dict) and isinstance(data.get("text"), str):
            return str(data["text"]).strip()
        raise MediaUnavailable(
            "the transcription server answered JSON without a text field: " + self._detail(text)
        )

    def _status_error(
        self, response: aiohttp.ClientResponse, body: bytes
    ) -> MediaUnavailable | MediaRejected:
        status = response.status
        reason = response.reason or ""
        detail = self._detail(_decode(body, response.charset))
        head = f"{status} {reason}".strip() + (f": {detail}" if detail else "")
        if status == 429:
            retry_after = _retry_after(response.headers.get("Retry-After"))
            hint = f"; retry after {retry_after:g} s" if retry_after is not None else ""
            return TranscriptionRateLimited(
                f"the transcription server rate-limited the request ({head}){hint}",
                retry_after=retry_after,
            )
        if status >= 500 or status in _TRANSIENT_4XX:
            return MediaUnavailable(f"the transcription server failed ({head})")
        if 300 <= status < 400:
            target = self._redact(response.headers.get("Location", "?"))[:MAX_DETAIL]
            return MediaRejected(
                f"the transcription server redirected ({status}) to {target}: "
                "set transcription.url to the final address"
            )
        if status in (401, 403):
            key = "the API key was refused" if self._api_key else "no API key is configured"
            return MediaRejected(f"transcription not authorised, {key} ({head})")
        if status == 404:
            return MediaRejected(
                f"transcription not found at {self._url.path} (check transcription.url and "
                f"transcription.model) ({head})"
            )
        return MediaRejected(f"the transcription server refused the audio ({head})")

    def _detail(self, text: str) -> str:
        return error_detail(text, self._api_key)

    def _redact(self, text: str) -> str:
        return redacted(text, self._api_key)


def _filename(filename: str, media_type: str) -> str:
    """A bare file name with an extension the server can pick a decoder by."""
    name = PurePosixPath(filename.replace("\\", "/")).name or "audio"
    if PurePosixPath(name).suffix:
        return name
    return name + _EXTENSIONS.get(media_type.split(";")[0].strip().lower(), "")


async def _read_bounded(response: aiohttp.ClientResponse) -> bytes:
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > _MAX_RESPONSE_BYTES:
            raise MediaUnavailable(
                f"the transcription server's answer ({response.status}) exceeds "
                f"{_MAX_RESPONSE_BYTES} bytes"
            )
    return bytes(body)


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")


def _retry_after(raw: str | None) -> float | None:
    """Seconds from ``Retry-After`` (seconds or an HTTP date), else None."""
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        parsed = email.utils.parsedate_tz(raw)
        return None if parsed is None else max(0.0, email.utils.mktime_tz(parsed) - time.time())
