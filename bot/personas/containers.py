"""Reading a card file: ``.json``, ``.png`` (a tEXt chunk holding base64 of the UTF-8 JSON;
``ccv3`` wins over ``chara``) or ``.charx`` (a zip with ``card.json`` at its root).

Every read is bounded: a file over ``MAX_CARD_BYTES`` is refused before it is read whole, a
CHARX's ``card.json`` is read only up to the same bound whatever its header claims (a zip
bomb), and an image over ``MAX_IMAGE_PIXELS`` is refused before Pillow decodes it. Each
failure is one CardError line.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from PIL import Image, PngImagePlugin

from bot.core.errors import CardError
from bot.personas.png import CARD_KEYWORDS, PNG_MAGIC, without_card

#: The largest card file read, and the largest ``card.json`` taken from a CHARX. Real cards
#: with big lorebooks and a portrait stay under 10 MB.
MAX_CARD_BYTES: Final = 32 * 1024 * 1024
#: The largest image decoded (Pillow must decode a PNG to reach chunks after its pixels).
MAX_IMAGE_PIXELS: Final = 40_000_000
#: The deepest nesting of objects and lists a card may have. Real cards stay under 10 levels;
#: Python's JSON parser takes nearly 1000, but copying, comparing and writing the card back
#: recurse too, and would fail with a RecursionError (a traceback, not a card error) far sooner.
MAX_JSON_DEPTH: Final = 100

Container = Literal["json", "png", "charx"]


@dataclass(frozen=True)
class CardFile:
    """What a card file held: the card as parsed, and the image of a PNG card."""

    card: Any
    container: Container
    # The PNG without its card chunks (kept for ``persona export --format png``).
    image: bytes | None = None
    # The PNG chunk the card came from ("ccv3" or "chara").
    chunk: str | None = None


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


def read_bounded(path: Path, what: str = "card file") -> bytes:
    """The bytes of ``path``, refused (before reading) when over ``MAX_CARD_BYTES``."""
    try:
        size = path.stat().st_size
        if size > MAX_CARD_BYTES:
            raise CardError(
                f"{path}: the {what} is {_mb(size)}, over the {_mb(MAX_CARD_BYTES)} limit"
            )
        with path.open("rb") as handle:
            data = handle.read(MAX_CARD_BYTES + 1)  # the file may have grown since stat
    except FileNotFoundError:
        raise CardError(f"{path}: no such file") from None
    except OSError as exc:
        raise CardError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) > MAX_CARD_BYTES:
        raise CardError(f"{path}: the {what} is over the {_mb(MAX_CARD_BYTES)} limit")
    return data


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    # 1e400 parses as infinity, which json.dumps would write back as the non-JSON `Infinity`:
    # the stored card could then never be read again (export would fail).
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


def _depth(value: Any) -> int:
    """How deeply objects and lists nest in ``value`` (iteratively: no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_JSON_DEPTH:
                children = item.values() if isinstance(item, dict) else item
                stack.extend((child, level + 1) for child in children)
    return deepest


def parse_json(raw: bytes, where: str) -> Any:
    """UTF-8 JSON (a BOM allowed) as Python values; NaN, Infinity, numbers too large for a
    float and nesting deeper than ``MAX_JSON_DEPTH`` are refused."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CardError(f"{where}: the card is not UTF-8 text") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except RecursionError:
        raise CardError(f"{where}: the card's JSON is nested too deeply") from None
    except ValueError as exc:
        raise CardError(f"{where}: the card is not valid JSON ({exc})") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise CardError(
            f"{where}: the card's JSON is nested more than {MAX_JSON_DEPTH} levels deep"
        )
    return value


def read_card_file(path: Path) -> CardFile:
    """The card in ``path``, by its suffix: ``.json``, ``.png`` or ``.charx``."""
    suffix = path.suffix.lower()
    if suffix not in (".json", ".png", ".charx"):
        raise CardError(f"{path}: not a card file (.json, .png or .charx)")
    data = read_bounded(path)
    if suffix == ".json":
        return CardFile(parse_json(data, str(path)), "json")
    if suffix == ".png":
        return _png(data, str(path))
    return CardFile(_charx(data, str(path)), "charx")


def _png(data: bytes, where: str) -> CardFile:
    if not data.startswith(PNG_MAGIC):
        raise CardError(f"{where}: not a PNG image")
    text = _png_text(data, where)
    found = {key.lower(): key for key in text if key.lower() in CARD_KEYWORDS}
    keyword = found.get("ccv3") or found.get("chara")
    if keyword is None:
        raise CardError(f"{where}: the PNG holds no card (no 'chara' or 'ccv3' text chunk)")
    value = "".join(str(text[keyword]).split())  # line breaks some writers add
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise CardError(f"{where}: the PNG's {keyword!r} chunk is not base64") from None
    card = parse_json(raw, f"{where} ({keyword!r} chunk)")
    return CardFile(card, "png", image=without_card(data), chunk=keyword.lower())


def _png_text(data: bytes, where: str) -> dict[str, Any]:
    """The text chunks of a PNG, read with Pillow (which decodes the image to reach the
    chunks after it, hence the size check first)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data), formats=["PNG"]) as image:
                if not isinstance(image, PngImagePlugin.PngImageFile):
                    raise CardError(f"{where}: not a PNG image")
                if image.width * image.height > MAX_IMAGE_PIXELS:
                    raise CardError(
                        f"{where}: the image is {image.width}x{image.height} pixels, over the "
                        f"{MAX_IMAGE_PIXELS // 1_000_000} megapixels a card may have"
                    )
                return dict(image.text)
        except CardError:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise CardError(f"{where}: the image is too large to decode") from None
        except (OSError, ValueError, SyntaxError, EOFError, zlib.error) as exc:
            raise CardError(f"{where}: not a readable PNG image ({exc})") from None


def _charx(data: bytes, where: str) -> Any:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            try:
                info = archive.getinfo("card.json")
            except KeyError:
                raise CardError(f"{where}: the CHARX has no card.json at its root") from None
            if info.file_size > MAX_CARD_BYTES:
                raise CardError(
                    f"{where}: card.json unpacks to {_mb(info.file_size)}, over the "
                    f"{_mb(MAX_CARD_BYTES)} limit"
                )
            with archive.open(info) as member:
                raw = member.read(MAX_CARD_BYTES + 1)
    except CardError:
        raise
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError, OSError) as exc:
        raise CardError(f"{where}: not a readable CHARX (zip) file ({exc})") from None
    if len(raw) > MAX_CARD_BYTES:
        raise CardError(f"{where}: card.json unpacks to over {_mb(MAX_CARD_BYTES)}")
    return parse_json(raw, f"{where} (card.json)")
