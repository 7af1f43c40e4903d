"""Images people send, made into what the Messages API accepts (docs/architecture.md#media).

``prepare_image`` reads untrusted bytes with Pillow and returns a ``PreparedImage``: JPEG, PNG,
GIF or WebP (the API's formats), the first frame of an animation, EXIF orientation applied, at
most ``max_edge`` px on the long edge and ``max_pixels`` pixels (the API downscales larger
images anyway and charges for them), at most ``max_bytes`` (5 MB of base64 is 3.75 MB raw).
The original bytes are kept when they already meet every limit; otherwise the image is
re-encoded, stepping quality down and falling back to JPEG until it fits.

Hostile input (decompression bombs, truncated or corrupt files, absurd shapes, exotic modes)
gives ``MediaRejected`` with a reason a person can read, never another exception: the format
is identified from the bytes (never from what the platform claims), only formats whose Pillow
plugins run no external program are opened, and pixel limits are checked from the header
before anything is decoded, which bounds memory and CPU. The work is CPU-bound: async code
calls ``prepare_image_async``, which runs it in a worker thread. Each call holds at most about
``_MAX_DECODE_PIXELS`` x 4 bytes, so callers bound how many run at once.
"""

from __future__ import annotations

import asyncio
import io
import logging
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Final

from PIL import Image, UnidentifiedImageError, features

from bot.core.errors import MediaRejected
from bot.core.media import PreparedImage

__all__ = ["MAX_INPUT_BYTES", "SUPPORTED_TYPES", "prepare_image", "prepare_image_async"]

log = logging.getLogger("personabot.media")

#: Pillow format name -> the media type the Messages API accepts.
SUPPORTED_TYPES: Final = {
    "JPEG": "image/jpeg",
    "PNG": "image/png",
    "GIF": "image/gif",
    "WEBP": "image/webp",
}
# What we let Pillow identify, in this order. Never EPS/PDF-like formats: Pillow's EPS plugin
# runs Ghostscript on the data. HEIF is there only when a plugin (pillow-heif) registered it.
_READABLE: Final = ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF", "AVIF", "HEIF")
# Formats that usually hold photographs: re-encoded as JPEG (or WebP with alpha), not PNG.
_PHOTO_FORMATS: Final = frozenset({"JPEG", "MPO", "AVIF", "HEIF"})

#: More than this is not read at all (Telegram bots get files up to 20 MB).
MAX_INPUT_BYTES: Final = 50_000_000
# Pixels the header may claim. JPEG is decoded at 1/2..1/8 scale (libjpeg's DCT scaling), so
# a 50-megapixel phone photo costs little; other formats decode in full, hence the second
# limit, checked on what will really be decoded. Both are below Pillow's own bomb limit
# (Image.MAX_IMAGE_PIXELS, ~89 MP), so what we accept never trips its warning.
_MAX_SOURCE_PIXELS: Final = 80_000_000
_MAX_DECODE_PIXELS: Final = 40_000_000

_JPEG_QUALITIES: Final = (90, 80, 70, 55, 40)
_WEBP_QUALITIES: Final = (90, 75, 60, 45)
_SHRINK: Final = 0.75  # when no encoding fits max_bytes, try again this much smaller
_MIN_EDGE: Final = 16
_EXIF_ORIENTATION: Final = 0x0112
_EXIF_GPS: Final = 0x8825
# EXIF orientation -> the transposition that shows the image upright (as ImageOps.exif_transpose;
# done here because a TIFF's orientation is a tag of the file, not of the converted frame).
_ORIENTATIONS: Final = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}

# Pillow's decoders raise all of these on broken input (truncation is OSError, a bad PNG
# chunk SyntaxError, a bad header struct.error, a broken AVIF RuntimeError...); Warning covers
# Pillow's warnings about corrupt data when the process turns warnings into errors (the test
# suite does).
_DECODE_ERRORS: Final = (
    OSError,
    RuntimeError,
    SyntaxError,
    ValueError,
    EOFError,
    struct.error,
    IndexError,
    KeyError,
    TypeError,
    ZeroDivisionError,
    OverflowError,
    Warning,
)


@dataclass(frozen=True, slots=True)
class _Limits:
    max_edge: int
    max_pixels: int
    max_bytes: int


def prepare_image(
    data: bytes,
    *,
    max_edge: int = 1568,
    max_bytes: int = 3_750_000,
    max_pixels: int = 1_150_000,
) -> PreparedImage:
    """The image in ``data`` as the model should get it; MediaRejected when it cannot be."""
    if max_edge < _MIN_EDGE or max_pixels < _MIN_EDGE * _MIN_EDGE or max_bytes < 1024:
        raise ValueError("prepare_image: limits too small for any image")
    if not data:
        raise MediaRejected("the image file is empty (0 bytes)")
    if len(data) > MAX_INPUT_BYTES:
        raise MediaRejected(
            f"the image file is too large to read ({len(data):,} bytes; "
            f"at most {MAX_INPUT_BYTES:,})"
        )
    limits = _Limits(max_edge, max_pixels, max_bytes)
    try:
        return _prepare(data, limits)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise MediaRejected(
            "the image has too many pixels to decode safely (a decompression bomb?)"
        ) from exc
    except UnidentifiedImageError as exc:
        raise MediaRejected(
            "not an image in a format we can read (JPEG, PNG, GIF, WebP, BMP, TIFF, AVIF)"
        ) from exc
    except _DECODE_ERRORS as exc:
        detail = str(exc)[:200] or type(exc).__name__
        raise MediaRejected(f"the image could not be read ({detail})") from exc


async def prepare_image_async(
    data: bytes,
    *,
    max_edge: int = 1568,
    max_bytes: int = 3_750_000,
    max_pixels: int = 1_150_000,
) -> PreparedImage:
    """``prepare_image`` in a worker thread, so the event loop never waits for Pillow."""
    return await asyncio.to_thread(
        prepare_image, data, max_edge=max_edge, max_bytes=max_bytes, max_pixels=max_pixels
    )


def _readable_formats() -> tuple[str, ...]:
    Image.init()  # idempotent; registers every bundled plugin (and any from pillow-heif)
    return tuple(f for f in _READABLE if f in Image.OPEN)


def _prepare(data: bytes, limits: _Limits) -> PreparedImage:
    with Image.open(io.BytesIO(data), formats=_readable_formats()) as im:
        width, height = im.size
        if width < 1 or height < 1:
            raise MediaRejected(f"the image has no pixels ({width}x{height})")
        if width * height > _MAX_SOURCE_PIXELS:
            raise MediaRejected(
                f"the image is too large to decode ({width}x{height} px; "
                f"at most {_MAX_SOURCE_PIXELS // 1_000_000} megapixels)"
            )
        fmt = str(im.format)
        jpeg = fmt in ("JPEG", "MPO")
        if not jpeg:
            _check_decodable(im.size, fmt)  # before getexif(), which may decode a PNG
        exif = im.getexif()
        orientation = exif.get(_EXIF_ORIENTATION, 1)
        if not isinstance(orientation, int) or orientation not in _ORIENTATIONS:
            orientation = 1  # absent, "upright", or nonsense: shown as stored
        turned = orientation in (5, 6, 7, 8)  # EXIF says: rotate by 90 degrees
        shown = (height, width) if turned else (width, height)
        target = _fit(*shown, limits)
        animated = bool(getattr(im, "is_animated", False))
        keep = (
            fmt in SUPPORTED_TYPES
            and not animated
            and orientation == 1
            and _EXIF_GPS not in exif  # a phone photo's location never leaves with it
            and (fmt != "JPEG" or im.mode in ("L", "RGB"))  # CMYK JPEG: not every reader
            and target == shown
            and len(data) <= limits.max_bytes
        )
        if jpeg:
            if target != shown:
                # Decode at the smallest DCT scale that is still at least the target size.
                im.draft(None, (target[1], target[0]) if turned else target)
            _check_decodable(im.size, fmt)
        im.load()  # decodes everything: a truncated or corrupt file fails here, even if kept
        # XMP holds a location as often as EXIF does (exif:GPSLatitude); re-encoding writes
        # none. Read after load(): a PNG may carry it in a chunk after the pixels.
        if keep and "xmp" not in im.info:
            return PreparedImage(data, SUPPORTED_TYPES[fmt], width, height)
        frame = _normalized(im)  # the first frame of an animation: frame 0 is loaded
        icc = _icc_profile(im, frame)
    if orientation != 1:
        frame = frame.transpose(_ORIENTATIONS[orientation])
    return _encode_within(frame, source=fmt, shown=shown, target=target, limits=limits, icc=icc)


def _check_decodable(size: tuple[int, int], fmt: str) -> None:
    if size[0] * size[1] > _MAX_DECODE_PIXELS:
        raise MediaRejected(
            f"the image is too large to decode ({size[0]}x{size[1]} px; at most "
            f"{_MAX_DECODE_PIXELS // 1_000_000} megapixels in {fmt})"
        )


def _fit(width: int, height: int, limits: _Limits) -> tuple[int, int]:
    """The largest size with the same aspect ratio (within 1 px) that meets the limits."""
    scale = min(
        1.0,
        limits.max_edge / max(width, height),
        math.sqrt(limits.max_pixels / (width * height)),
    )
    if scale >= 1.0:
        return width, height
    long, short = max(width, height), min(width, height)
    new_long = max(1, math.floor(long * scale))
    new_short = max(1, round(new_long * short / long))
    while new_long * new_short > limits.max_pixels and new_long > 1:
        new_long -= 1
        new_short = max(1, round(new_long * short / long))
    return (new_long, new_short) if width >= height else (new_short, new_long)


def _has_alpha(im: Image.Image) -> bool:
    return im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info


def _normalized(im: Image.Image) -> Image.Image:
    """The frame in mode L, RGB or RGBA (what every encoder and the resampler take)."""
    if im.mode in ("L", "RGB", "RGBA") and "transparency" not in im.info:
        return im.copy()
    if im.mode.startswith("I;16"):
        return im.convert("I").point(lambda v: v / 257).convert("L")
    if im.mode in ("I", "F"):
        low, high = im.getextrema()
        if not isinstance(low, (int, float)) or not isinstance(high, (int, float)):
            raise MediaRejected(f"the image has an unreadable pixel format ({im.mode})")
        span = float(high - low) or 1.0
        return im.point(lambda v: (v - low) * 255 / span).convert("L")
    if im.mode == "1":
        return im.convert("L")
    return im.convert("RGBA" if _has_alpha(im) else "RGB")


def _icc_profile(source: Image.Image, frame: Image.Image) -> bytes | None:
    """The colour profile, when it still describes the frame's colour space."""
    profile = source.info.get("icc_profile")
    if not isinstance(profile, bytes) or not profile:
        return None
    same = source.mode == frame.mode or {source.mode, frame.mode} <= {"RGB", "RGBA"}
    return profile if same else None


def _encode_within(
    image: Image.Image,
    *,
    source: str,
    shown: tuple[int, int],
    target: tuple[int, int],
    limits: _Limits,
    icc: bytes | None,
) -> PreparedImage:
    """Resize to ``target`` and encode; smaller still when no encoding fits ``max_bytes``."""
    size = target
    while True:
        frame = image if image.size == size else _resized(image, size)
        for fmt, quality in _ladder(source, _has_alpha(frame)):
            data = _encode(frame, fmt, quality, icc)
            if len(data) <= limits.max_bytes:
                log.debug(
                    "image %s %dx%d -> %s quality %s %dx%d, %d bytes",
                    source,
                    *shown,
                    fmt,
                    quality,
                    *size,
                    len(data),
                )
                return PreparedImage(data, SUPPORTED_TYPES[fmt], *size)
        # Every size is fitted from the original shape, so the aspect ratio never drifts.
        smaller = replace(limits, max_edge=math.floor(max(size) * _SHRINK))
        if smaller.max_edge < _MIN_EDGE:
            raise MediaRejected(
                f"the image could not be made smaller than {limits.max_bytes:,} bytes"
            )
        size = _fit(*shown, smaller)


def _resized(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    # reducing_gap: shrink by whole factors first (cheap box filter), then Lanczos.
    return image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)


def _ladder(source: str, alpha: bool) -> Iterator[tuple[str, int | None]]:
    """Encodings to try, best first: the source's own kind, then smaller lossy ones."""
    webp = features.check_module("webp")
    photo = source in _PHOTO_FORMATS
    if webp and (source == "WEBP" or (photo and alpha)):
        yield from (("WEBP", q) for q in _WEBP_QUALITIES)
    else:
        if alpha or not photo:
            yield "PNG", None  # drawings, screenshots, GIF frames: lossless first
        if alpha and webp:
            yield from (("WEBP", q) for q in _WEBP_QUALITIES)  # keeps the alpha channel
    yield from (("JPEG", q) for q in _JPEG_QUALITIES)  # with alpha: composited on white


def _encode(frame: Image.Image, fmt: str, quality: int | None, icc: bytes | None) -> bytes:
    out = io.BytesIO()
    extra: dict[str, object] = {"icc_profile": icc} if icc else {}
    if fmt == "JPEG":
        if frame.mode == "RGBA":
            flat = Image.new("RGB", frame.size, (255, 255, 255))
            flat.paste(frame, mask=frame.getchannel("A"))
            frame = flat
        frame.save(out, "JPEG", quality=quality, **extra)
    elif fmt == "WEBP":
        frame.save(out, "WEBP", quality=quality, method=4, **extra)
    else:
        frame.save(out, "PNG", **extra)
    return out.getvalue()
