"""Review 15: a photo's location never leaves with it, whichever metadata block holds it.

bot/runtime/images.py keeps the original bytes of an image that meets every limit, unless its
EXIF has a GPS block. A location is as often in XMP (``exif:GPSLatitude``: photos edited or
exported by Lightroom, Photoshop, Apple Photos; an image sent "as a file" keeps it), and that
went to the model provider untouched. Re-encoding writes no XMP, so such images are
re-encoded like the ones with EXIF GPS.
"""

from __future__ import annotations

import io

import pytest
from PIL import Image, PngImagePlugin

from bot.runtime.images import prepare_image

XMP = (
    b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
    b'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
    b'xmlns:exif="http://ns.adobe.com/exif/1.0/" exif:GPSLatitude="52,31.20N" '
    b'exif:GPSLongitude="13,24.30E"/></rdf:RDF></x:xmpmeta>'
)


def with_xmp(fmt: str) -> bytes:
    image = Image.new("RGB", (640, 480), "green")
    out = io.BytesIO()
    if fmt == "PNG":
        info = PngImagePlugin.PngInfo()
        info.add_itxt("XML:com.adobe.xmp", XMP.decode())
        image.save(out, "PNG", pnginfo=info)
    else:
        image.save(out, fmt, xmp=XMP)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_a_location_in_xmp_never_leaves_with_the_photo(fmt: str) -> None:
    data = with_xmp(fmt)
    assert b"GPSLatitude" in data
    prepared = prepare_image(data)
    assert b"GPSLatitude" not in prepared.data
    assert Image.open(io.BytesIO(prepared.data)).size == (640, 480)  # the same picture
