"""prepare_image: what people send becomes an image the Messages API takes, or a clear refusal.

Images are made with Pillow in the test; the results are decoded with Pillow again, so every
property is checked on the real bytes a model would get.
"""

from __future__ import annotations

import asyncio
import io
import struct
import time
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageFilter

from bot.core.errors import MediaRejected
from bot.core.media import PreparedImage
from bot.runtime.images import SUPPORTED_TYPES, prepare_image, prepare_image_async
from memory.tokens import image_tokens

MAX_EDGE = 1568
MAX_PIXELS = 1_150_000
MAX_BYTES = 3_750_000


def _encode(image: Image.Image, fmt: str, **params: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **params)
    return out.getvalue()


def _decoded(prepared: PreparedImage) -> Image.Image:
    """The prepared bytes decoded from scratch, checked against what prepare_image claims."""
    image = Image.open(io.BytesIO(prepared.data))
    image.load()
    assert image.format in SUPPORTED_TYPES, image.format
    assert SUPPORTED_TYPES[image.format] == prepared.media_type
    assert image.size == (prepared.width, prepared.height)
    assert getattr(image, "n_frames", 1) == 1
    return image


def _assert_within_limits(prepared: PreparedImage, max_bytes: int = MAX_BYTES) -> None:
    assert max(prepared.width, prepared.height) <= MAX_EDGE
    assert prepared.width * prepared.height <= MAX_PIXELS
    assert len(prepared.data) <= max_bytes


def _assert_same_shape(prepared: PreparedImage, width: int, height: int) -> None:
    """The aspect ratio is kept: the short edge is within 1 px of what the long edge implies."""
    if width >= height:
        off = prepared.height - prepared.width * height / width
    else:
        off = prepared.width - prepared.height * width / height
    assert abs(off) <= 1, f"{width}x{height} became {prepared.width}x{prepared.height}"


def _outcome(data: bytes) -> PreparedImage | MediaRejected:
    """What prepare_image made of ``data``: the image, or the refusal (any other error fails)."""
    try:
        return prepare_image(data)
    except MediaRejected as exc:
        return exc


def _bomb_png(width: int, height: int) -> bytes:
    """A 1-bit PNG of ``width`` x ``height`` zero pixels: a few KB that claim gigapixels."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    rows = zlib.compress(b"\0" * ((width // 8 + 1) * min(height, 2000)), 9)
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")
    )


# --------------------------------------------------------------------- random images

# (mode, formats that store it). "P+t" is a palette image with a transparent colour.
MODES = {
    "RGB": ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF"),
    "RGBA": ("PNG", "WEBP", "TIFF", "GIF"),
    "L": ("JPEG", "PNG", "GIF", "BMP", "TIFF"),
    "LA": ("PNG", "TIFF"),
    "P": ("PNG", "GIF", "BMP", "TIFF"),
    "P+t": ("PNG", "GIF"),
    "1": ("PNG", "BMP", "TIFF"),
    "CMYK": ("JPEG", "TIFF"),
    "I;16": ("PNG", "TIFF"),
}


def _has_alpha(image: Image.Image) -> bool:
    return "A" in image.mode or "transparency" in image.info


@st.composite
def random_images(draw: st.DrawFn) -> tuple[bytes, int, int, str, str]:
    """An encoded image: random mode (alpha or not), size up to 6000x4000 (either way up),
    format among the API's four plus BMP and TIFF, random content."""
    mode = draw(st.sampled_from(sorted(MODES)))
    fmt = draw(st.sampled_from(MODES[mode]))
    long = draw(st.one_of(st.integers(1, MAX_EDGE), st.integers(MAX_EDGE + 1, 6000)))
    top = min(long, 4000)  # strips of any shape, and ordinary photo shapes as often
    short = draw(st.one_of(st.integers(1, top), st.integers(min(top, max(1, long // 3)), top)))
    width, height = (long, short) if draw(st.booleans()) else (short, long)
    if fmt == "BMP":  # uncompressed: keep it under prepare_image's 50 MB input limit
        height = min(height, max(1, 12_000_000 // width))
    # A few random pixels blown up to the full size: photo-like smooth content, cheap to encode.
    seed_w, seed_h = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    pixels = draw(st.binary(min_size=seed_w * seed_h * 4, max_size=seed_w * seed_h * 4))
    seed = Image.frombytes("RGBA", (seed_w, seed_h), pixels)
    image = seed.resize((width, height), Image.Resampling.BILINEAR)
    if mode == "P+t":
        image = image.convert("RGB").quantize(16)
        image.info["transparency"] = 0
    elif mode == "I;16":
        image = image.convert("L").point(lambda v: v * 256, "I").convert("I;16")
    else:
        image = image.convert(mode)
    params: dict[str, Any] = {"compression": "tiff_deflate"} if fmt == "TIFF" else {}
    return _encode(image, fmt, **params), width, height, mode, fmt


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(random_images(), st.sampled_from([MAX_BYTES, 60_000]))
@pytest.mark.timeout(600)
def test_any_image_becomes_one_the_api_takes(
    case: tuple[bytes, int, int, str, str], max_bytes: int
) -> None:
    data, width, height, _mode, _fmt = case
    prepared = prepare_image(data, max_bytes=max_bytes)
    decoded = _decoded(prepared)
    _assert_within_limits(prepared, max_bytes)
    _assert_same_shape(prepared, width, height)
    if _has_alpha(Image.open(io.BytesIO(data))) and prepared.media_type != "image/jpeg":
        assert _has_alpha(decoded), "alpha was kept"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4096))
def test_random_bytes_are_rejected(data: bytes) -> None:
    with pytest.raises(MediaRejected):
        prepare_image(data)


# Small valid files of every readable format, damaged at random below.
SAMPLES = [
    _encode(Image.effect_noise((64, 48), 40).convert("RGB"), "JPEG"),
    _encode(Image.effect_noise((64, 48), 40).convert("RGBA"), "PNG"),
    _encode(Image.effect_noise((64, 48), 40).convert("P"), "GIF"),
    _encode(Image.effect_noise((64, 48), 40).convert("RGB"), "WEBP"),
    _encode(Image.effect_noise((64, 48), 40).convert("RGB"), "BMP"),
    _encode(Image.effect_noise((64, 48), 40).convert("RGB"), "TIFF", compression="tiff_lzw"),
]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(SAMPLES),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=8),
    st.integers(1, 10_000),
)
def test_damaged_files_are_rejected_or_still_valid(
    sample: bytes, flips: list[tuple[int, int]], keep: int
) -> None:
    """Flipped bytes and truncation anywhere: a clear refusal or a valid image, nothing else."""
    data = bytearray(sample[:keep])
    for at, value in flips:
        if data:
            data[at % len(data)] = value
    outcome = _outcome(bytes(data))
    if isinstance(outcome, MediaRejected):
        assert str(outcome), "a refusal says why"
    else:
        _decoded(outcome)
        _assert_within_limits(outcome)


# --------------------------------------------------------------------- what is kept


def test_an_image_within_every_limit_is_sent_as_it_came() -> None:
    data = _encode(Image.effect_noise((800, 600), 30).convert("RGB"), "JPEG", quality=85)
    prepared = prepare_image(data)
    assert prepared == PreparedImage(data, "image/jpeg", 800, 600)


def test_the_format_comes_from_the_bytes_not_a_name() -> None:
    """A PNG is a PNG whatever the platform called it: prepare_image takes no media type."""
    data = _encode(Image.new("RGB", (30, 20), "red"), "PNG")
    assert prepare_image(data).media_type == "image/png"


def test_a_large_photo_is_downscaled_to_the_limits_as_jpeg() -> None:
    photo = Image.effect_noise((4000, 3000), 50).convert("RGB")
    prepared = prepare_image(_encode(photo, "JPEG"))
    assert prepared.media_type == "image/jpeg"
    assert (prepared.width, prepared.height) == (1238, 928)  # 1.15 MP, 4:3
    _decoded(prepared)
    _assert_within_limits(prepared)


def test_a_png_photo_too_big_for_max_bytes_becomes_jpeg() -> None:
    channels = [Image.effect_noise((1000, 1000), 20) for _ in range(3)]
    photo = Image.merge("RGB", channels).filter(ImageFilter.GaussianBlur(1))
    data = _encode(photo, "PNG")
    assert len(data) > 1_000_000
    prepared = prepare_image(data, max_bytes=300_000)
    assert prepared.media_type == "image/jpeg"
    assert (prepared.width, prepared.height) == (1000, 1000)
    assert len(prepared.data) <= 300_000


def test_transparency_is_kept_when_the_image_is_re_encoded() -> None:
    image = Image.new("RGBA", (3000, 1000), (0, 0, 255, 255))
    image.paste((0, 0, 0, 0), (0, 0, 1500, 1000))  # left half transparent
    prepared = prepare_image(_encode(image, "PNG"))
    assert prepared.media_type == "image/png"
    decoded = _decoded(prepared)
    assert decoded.mode == "RGBA"
    assert decoded.getpixel((10, 10))[3] == 0
    assert decoded.getpixel((prepared.width - 10, 10)) == (0, 0, 255, 255)


def test_transparency_that_must_become_jpeg_is_put_on_white() -> None:
    noise = Image.effect_noise((1000, 1000), 100)
    image = Image.merge("RGBA", [noise, noise, noise, Image.new("L", (1000, 1000), 255)])
    image.paste((0, 0, 0, 0), (0, 0, 200, 200))  # a transparent corner
    prepared = prepare_image(_encode(image, "PNG"), max_bytes=200_000)
    assert prepared.media_type in ("image/webp", "image/jpeg")
    if prepared.media_type == "image/jpeg":
        corner = _decoded(prepared).convert("RGB").getpixel((20, 20))
        assert min(corner) > 240, corner
    else:
        assert _decoded(prepared).getpixel((20, 20))[3] == 0


def test_exif_orientation_is_applied() -> None:
    """A phone photo stored sideways (orientation 6) is shown upright, red band on top."""
    stored = Image.new("RGB", (400, 200), "white")
    stored.paste((255, 0, 0), (0, 0, 40, 200))  # the left band is the top once rotated
    exif = Image.Exif()
    exif[0x0112] = 6
    prepared = prepare_image(_encode(stored, "JPEG", exif=exif))
    decoded = _decoded(prepared).convert("RGB")
    assert decoded.size == (200, 400)
    red, _, blue = decoded.getpixel((100, 10))
    assert red > 200 and blue < 60
    assert decoded.getexif().get(0x0112) is None


def test_location_metadata_never_leaves_with_the_photo() -> None:
    exif = Image.Exif()
    exif[0x8825] = {2: (52.0, 31.0, 0.0), 4: (13.0, 24.0, 0.0)}  # GPS latitude, longitude
    data = _encode(Image.new("RGB", (300, 200), "green"), "JPEG", exif=exif)
    assert 0x8825 in Image.open(io.BytesIO(data)).getexif()
    prepared = prepare_image(data)
    assert prepared.data != data
    assert 0x8825 not in _decoded(prepared).getexif()


@pytest.mark.parametrize("fmt", ["GIF", "WEBP", "PNG"])
def test_an_animation_becomes_its_first_frame(fmt: str) -> None:
    frames = [Image.new("RGB", (120, 80), c) for c in ("red", "lime", "blue")]
    out = io.BytesIO()
    frames[0].save(out, fmt, save_all=True, append_images=frames[1:], duration=100, loop=0)
    prepared = prepare_image(out.getvalue())
    red, green, blue = _decoded(prepared).convert("RGB").getpixel((60, 40))
    assert red > 240 and green < 15 and blue < 15


@pytest.mark.parametrize(
    ("mode", "fmt"), [("CMYK", "JPEG"), ("I;16", "TIFF"), ("P", "BMP"), ("LA", "PNG")]
)
def test_unusual_modes_and_formats_become_plain_images(mode: str, fmt: str) -> None:
    image = Image.new("RGB", (90, 60), (200, 100, 50))
    if mode == "I;16":
        image = Image.new("I;16", (90, 60), 30_000)
    prepared = prepare_image(_encode(image.convert(mode), fmt))
    decoded = _decoded(prepared)
    assert decoded.size == (90, 60)
    if mode == "I;16":  # 30000 of 65535 is a middle grey, not clipped to white
        assert 100 < decoded.convert("L").getpixel((5, 5)) < 130


def test_a_one_pixel_strip_keeps_its_shape() -> None:
    prepared = prepare_image(_encode(Image.new("L", (1, 100_000), 128), "PNG"))
    assert (prepared.width, prepared.height) == (1, MAX_EDGE)
    _decoded(prepared)


# --------------------------------------------------------------------- refused


@pytest.mark.parametrize(
    ("width", "height", "reason"),
    [
        (20_000, 20_000, "too many pixels"),  # over Pillow's own bomb limit: refused at once
        (10_000, 10_000, "too many pixels"),  # Pillow only warns: still refused
        (9_000, 8_000, "too large to decode"),  # under Pillow's limit, over ours
    ],
)
def test_decompression_bombs_are_refused_quickly(width: int, height: int, reason: str) -> None:
    data = _bomb_png(width, height)
    assert len(data) < 200_000
    started = time.perf_counter()
    with pytest.raises(MediaRejected, match=reason):
        prepare_image(data)
    assert time.perf_counter() - started < 2.0


def _jpeg_claiming(width: int, height: int) -> bytes:
    """A 1 KB JPEG whose frame header claims ``width`` x ``height``."""
    data = bytearray(_encode(Image.new("RGB", (64, 48), "red"), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def test_a_jpeg_header_claiming_72_megapixels_is_decoded_small() -> None:
    """Decoded at 1/8 scale (libjpeg fills in what the data lacks): 72 MP is over the 40 MP
    prepare_image decodes in full, so this passes only because JPEG is decoded small."""
    started = time.perf_counter()
    prepared = prepare_image(_jpeg_claiming(9000, 8000))
    assert time.perf_counter() - started < 5.0  # about 0.25 s here
    _decoded(prepared)
    _assert_within_limits(prepared)
    _assert_same_shape(prepared, 9000, 8000)


def test_a_jpeg_header_claiming_gigapixels_is_refused_unread() -> None:
    started = time.perf_counter()
    with pytest.raises(MediaRejected, match="too many pixels"):
        prepare_image(_jpeg_claiming(60_000, 60_000))
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"hello, this is not a picture", "not an image"),
        (SAMPLES[0][: len(SAMPLES[0]) // 2], "could not be read"),  # a truncated JPEG
        (SAMPLES[1][: len(SAMPLES[1]) // 2], "could not be read"),  # a truncated PNG
        (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n", "not an image"),  # no Ghostscript
    ],
)
def test_what_is_not_a_usable_image_is_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(MediaRejected, match=reason):
        prepare_image(data)


def test_an_oversized_file_is_not_read() -> None:
    with pytest.raises(MediaRejected, match="too large to read"):
        prepare_image(b"\xff\xd8\xff" + bytes(60_000_000))


# --------------------------------------------------------------------- async


async def test_the_async_form_leaves_the_event_loop_free() -> None:
    # Large enough to be scaled down (a few tenths of a second of Pillow's work), small
    # enough not to cost the suite seconds; the loop yields for a millisecond a pass instead
    # of spinning, so it does not take the core the thread works on.
    photo = _encode(Image.effect_noise((2400, 1800), 50).convert("RGB"), "PNG")
    task = asyncio.create_task(prepare_image_async(photo))
    turns = 0
    while not task.done():  # each pass is one turn of the loop while Pillow works elsewhere
        turns += 1
        await asyncio.sleep(0.001)
    prepared = task.result()
    assert turns > 10
    assert prepared == prepare_image(photo)


# --------------------------------------------------------------------- tokens


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [
        (200, 200, 54),  # 40,000 px / 750, rounded up
        (1000, 1000, 1334),
        (1092, 1092, 1590),  # the API's largest unscaled square
        (784, 1568, 1640),  # its largest unscaled 1:2
        (6000, 4000, 1638),  # scaled down by the API first: never more than ~1,640
        (1, 100_000, 3),  # 1x1568 after the long-edge rule
    ],
)
def test_image_tokens_follow_the_api_rule(width: int, height: int, tokens: int) -> None:
    assert image_tokens(width, height) == tokens


def test_a_prepared_image_costs_what_the_api_would_charge_for_it() -> None:
    prepared = prepare_image(_encode(Image.new("RGB", (6000, 4000), "gray"), "JPEG"))
    assert image_tokens(prepared.width, prepared.height) <= MAX_PIXELS // 750 + 1
    with pytest.raises(ValueError, match="no pixels"):
        image_tokens(0, 10)
