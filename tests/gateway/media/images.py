"""Images made in memory for the media tests (no files, no network)."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from typing import Any

from PIL import Image

from gateway.media import ImageRef


def encode(image: Image.Image, fmt: str, **options: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def picture(width: int, height: int, mode: str = "RGB") -> Image.Image:
    """A small gradient (compressible, but not a flat colour)."""
    gradient = Image.linear_gradient("L").resize((width, height))
    if mode == "L":
        return gradient
    return Image.merge("RGB", (gradient, gradient.transpose(Image.Transpose.ROTATE_90)
                               .resize((width, height)), gradient)).convert(mode)  # fmt: skip


def png(width: int = 64, height: int = 48) -> bytes:
    return encode(picture(width, height), "PNG")


def jpeg(width: int = 64, height: int = 48, **options: Any) -> bytes:
    return encode(picture(width, height), "JPEG", **options)


def webp(width: int = 64, height: int = 48) -> bytes:
    return encode(picture(width, height), "WEBP")


def gif(width: int = 64, height: int = 48, frames: int = 3) -> bytes:
    images = [picture(width, height).rotate(30 * i).convert("P") for i in range(frames)]
    out = io.BytesIO()
    images[0].save(out, format="GIF", save_all=True, append_images=images[1:], duration=100)
    return out.getvalue()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def ref(
    data: bytes | str, where: str = "messages.0.content.0", media_type: str = "image/png"
) -> ImageRef:
    url = data if isinstance(data, str) else data_url(data, media_type)
    return ImageRef(url=url, where=where)


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_header_only(width: int, height: int) -> bytes:
    """A valid-looking PNG that declares width x height (1-bit grey) but carries a few bytes of
    pixel data: a decompression bomb's header, built without ever allocating its pixels."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat)
            + png_chunk(b"IEND", b""))  # fmt: skip


def png_blank(width: int, height: int) -> bytes:
    """A complete, valid 1-bit PNG of width x height zeros: a few KB for tens of megapixels."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    row = b"\0" * (1 + (width + 7) // 8)  # filter byte + packed pixels
    idat = zlib.compress(row * height, 9)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat)
            + png_chunk(b"IEND", b""))  # fmt: skip


def png_file(
    width: int,
    height: int,
    idat_bodies: list[bytes],
    *,
    depth: int = 8,
    colour: int = 2,
    interlaced: bool = False,
    before_idat: bytes = b"",
    after_idat: bytes = b"",
) -> bytes:
    """A PNG built chunk by chunk (valid CRCs) around the given IDAT bodies: for pixel data
    that an encoder would never write (bad filters, short or corrupt zlib streams)."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, int(interlaced))
    idats = b"".join(png_chunk(b"IDAT", body) for body in idat_bodies)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + before_idat + idats + after_idat
            + png_chunk(b"IEND", b""))  # fmt: skip
