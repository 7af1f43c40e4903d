"""PNG chunks, for writing cards: the kept image loses its old card chunks on import and gets
new ``chara`` and ``ccv3`` tEXt chunks on export, inserted before IEND as SillyTavern writes
them. The pixels and every other chunk stay byte for byte (reading a card is Pillow's job,
bot/personas/containers.py)."""

from __future__ import annotations

import base64
import io
import struct
import zlib

from PIL import Image

from bot.core.errors import CardError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: Keywords of the text chunks a card lives in (compared case-insensitively, as readers do).
CARD_KEYWORDS = frozenset({"chara", "ccv3"})
_TEXT_CHUNKS = frozenset({b"tEXt", b"zTXt", b"iTXt"})


def chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """The ``(type, payload)`` chunks of a PNG file, up to and including IEND."""
    if not data.startswith(PNG_MAGIC):
        raise CardError("not a PNG image")
    out: list[tuple[bytes, bytes]] = []
    pos = len(PNG_MAGIC)
    while True:
        if pos + 8 > len(data):
            raise CardError("the PNG image is truncated (no IEND chunk)")
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        end = pos + 8 + length + 4
        if end > len(data):
            raise CardError("the PNG image is truncated")
        out.append((kind, data[pos + 8 : pos + 8 + length]))
        pos = end
        if kind == b"IEND":
            return out


def _chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def _is_card_chunk(kind: bytes, payload: bytes) -> bool:
    if kind not in _TEXT_CHUNKS:
        return False
    keyword = payload.split(b"\0", 1)[0]
    return keyword.decode("latin-1").lower() in CARD_KEYWORDS


def _assemble(parts: list[tuple[bytes, bytes]]) -> bytes:
    return PNG_MAGIC + b"".join(_chunk(kind, payload) for kind, payload in parts)


def without_card(data: bytes) -> bytes:
    """The image without its ``chara``/``ccv3`` chunks (so a kept image holds no stale card)."""
    return _assemble([c for c in chunks(data) if not _is_card_chunk(*c)])


def with_card(image: bytes, *, v2_json: str, v3_json: str) -> bytes:
    """``image`` with the card as tEXt ``chara`` (V2) and ``ccv3`` (V3) chunks before IEND;
    their values are base64 of the UTF-8 JSON. Card chunks already there are replaced."""
    parts = [c for c in chunks(image) if not _is_card_chunk(*c)]
    texts = [
        (b"tEXt", b"chara\0" + base64.b64encode(v2_json.encode("utf-8"))),
        (b"tEXt", b"ccv3\0" + base64.b64encode(v3_json.encode("utf-8"))),
    ]
    return _assemble(parts[:-1] + texts + parts[-1:])


def plain_image(width: int = 400, height: int = 600) -> bytes:
    """A plain portrait-sized PNG for a persona that has no image of its own."""
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (92, 98, 112)).save(buffer, format="PNG")
    return buffer.getvalue()
