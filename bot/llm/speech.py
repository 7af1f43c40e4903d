"""Text to speech through an OpenAI-compatible ``POST {base_url}/audio/speech``.

The built-in ``Synthesizer`` (bot/core/speech.py): OpenAI's hosted API and self-hosted
servers that speak the same JSON (Kokoro-FastAPI, openedai-speech, LocalAI) answer the body
``{model, voice, input, response_format[, speed, instructions]}`` with the audio bytes.
Everything that goes wrong is translated once, here, into ``SpeechFailed``: HTTP statuses,
timeouts, connection errors, redirects (a wrong ``url``: the text is not sent elsewhere), and
an answer that is not audio of the format asked for (``audio_problem``: a proxy's HTML page or
a server that ignored ``response_format``). No retries: the runtime sends the text instead.
Error texts name the status and the server's message (at most 200 characters), never the key.
Operator guide: docs/voices.md.
"""

from __future__ import annotations

import logging
from typing import Final

import aiohttp

from bot.core.errors import ConfigError, SpeechFailed
from bot.core.speech import MEDIA_TYPES, Speech, VoiceRequest, audio_problem, ogg_opus_duration
from bot.llm.audio_http import endpoint, error_detail

__all__ = ["MAX_AUDIO_BYTES", "OpenAISpeech"]

log = logging.getLogger("personabot.speech")

#: A longer answer is not a voice message (Telegram takes 50 MB; a minute of Opus is ~250 kB).
MAX_AUDIO_BYTES: Final = 20 * 1024 * 1024


class OpenAISpeech:
    """A ``Synthesizer`` speaking OpenAI's ``/audio/speech``; ``aclose()`` when done.

    ``session``: an aiohttp session to use and leave open (tests, a shared pool); without one
    it opens its own on first use and closes it in ``aclose()``. ``timeout_seconds`` bounds
    one request; the runtime's own (shorter) timeout usually decides first.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        timeout_seconds: float = 60.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self._url = endpoint(base_url, key="voice.url", path="audio/speech")
        if not timeout_seconds > 0:
            raise ConfigError([f"voice.timeout_seconds: {timeout_seconds} is not positive"])
        self._api_key = api_key.strip() if api_key and api_key.strip() else None
        self._timeout = timeout_seconds
        self._session = session
        self._owns_session = session is None
        self._closed = False

    async def synthesize(self, text: str, voice: VoiceRequest) -> Speech:
        """The audio of ``text`` in ``voice.format``, checked to be that format."""
        if self._closed:
            raise SpeechFailed("the speech client is closed (shutting down)")
        body: dict[str, object] = {
            "model": voice.model,
            "voice": voice.voice,
            "input": text,
            "response_format": voice.format,
        }
        if voice.speed is not None:
            body["speed"] = voice.speed
        if voice.instructions:
            body["instructions"] = voice.instructions
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        data = await self._post(body, headers)
        if (problem := audio_problem(data, voice.format)) is not None:
            raise SpeechFailed(f"the speech server at {self._where}: {problem}")
        duration = ogg_opus_duration(data) if voice.format == "opus" else None
        log.debug("spoke %d characters into %d bytes (%s)", len(text), len(data), voice.format)
        return Speech(data, MEDIA_TYPES[voice.format], duration)

    async def aclose(self) -> None:
        """Close the session if this client opened it; later calls fail."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None and self._owns_session:
            await session.close()

    async def __aenter__(self) -> OpenAISpeech:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def _where(self) -> str:
        return f"{self._url.host}:{self._url.port}"

    async def _post(self, body: dict[str, object], headers: dict[str, str]) -> bytes:
        if self._session is None:
            # No await between the check and the assignment: concurrent first calls share one.
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.post(
                self._url,
                json=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                allow_redirects=False,
            ) as response:
                data = await _read_bounded(response)
                if not 200 <= response.status < 300:
                    raise SpeechFailed(self._status_error(response, data))
                return data
        except TimeoutError:
            raise SpeechFailed(
                f"the speech server at {self._where} did not answer within {self._timeout:g} s"
            ) from None
        except aiohttp.ClientResponseError as exc:
            # Its repr carries the request headers, so the Authorization header: not chained.
            raise SpeechFailed(
                f"speech at {self._where} failed: {type(exc).__name__} {exc.status}"
            ) from None
        except aiohttp.ClientError as exc:
            raise SpeechFailed(
                f"could not reach the speech server at {self._where} ({type(exc).__name__})"
            ) from exc

    def _status_error(self, response: aiohttp.ClientResponse, data: bytes) -> str:
        status = response.status
        head = f"{status} {response.reason or ''}".strip()
        detail = error_detail(
            data.decode(response.charset or "utf-8", errors="replace"), self._api_key
        )
        head += f": {detail}" if detail else ""
        if 300 <= status < 400:
            return f"the speech server redirected ({head}): set voice.url to the final address"
        if status in (401, 403):
            key = "the API key was refused" if self._api_key else "no API key is configured"
            return f"speech not authorised, {key} ({head})"
        if status == 404:
            return (
                f"speech not found at {self._url.path} (check voice.url and voice.model) ({head})"
            )
        return f"the speech server failed ({head})"


async def _read_bounded(response: aiohttp.ClientResponse) -> bytes:
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > MAX_AUDIO_BYTES:
            raise SpeechFailed(
                f"the speech server's answer ({response.status}) exceeds {MAX_AUDIO_BYTES} bytes"
            )
    return bytes(body)
