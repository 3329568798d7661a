"""A PNG's pixel data checked the way a decoder reads it, without decoding a pixel.

After Image.verify() (every chunk's CRC, up to IEND), what still makes Pillow's PNG decoder
(and so the engine's load_image) fail is in the compressed rows: a corrupt zlib stream, a stream
or an IDAT run that ends before the last row, and a row whose filter type is not 0-4. Inflating
the rows and reading each row's filter byte finds all of those, at about half the CPU of a full
decode (no unfiltering, no pixel buffer: python -m bench media). The decoder stops reading once
the last row is complete; so does this check, except that the end of the zlib stream is still
read to its checksum, and a stream that ends early is refused even at a row boundary (Pillow
keeps such an image with black rows; libpng refuses it).

A file whose decoding does more than that is left to a full decode (`rows_to_check` answers
None): an APNG (its frame chunks are pixel data too), or one with chunks between the image data
and IEND, which Pillow parses once the pixels are read and can fail on.

The inflating is zlib-ng's (python-zlib-ng: CPython's zlib module over zlib-ng's SIMD inflate),
in 0.4-0.8x of stdlib zlib's CPU on these rows (docs/benchmarks.md). It keeps zlib's
decompressobj semantics this loop relies on (max_length, unconsumed_tail, eof) and its
verdicts, message for message (tests/gateway/media/test_png.py compares them on broken
streams); python-isal's inflate, about as fast, was rejected: it accepts a window size
zlib refuses and buffers input past unconsumed_tail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from zlib_ng import zlib_ng

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Colour type -> samples per pixel (PNG spec 11.2.2); Pillow's open refuses other types.
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
# Adam7 passes: (first column, column step, first row, row step).
_ADAM7 = ((0, 8, 0, 8), (4, 8, 0, 8), (0, 4, 4, 8), (2, 4, 0, 4), (0, 2, 2, 4), (1, 2, 0, 2),
          (0, 1, 1, 2))  # fmt: skip
_MAX_FILTER = 4  # None, Sub, Up, Average, Paeth
# Compressed bytes given to zlib-ng per call, and decompressed bytes taken back: memory stays at
# a few hundred KB whatever the image, and zlib-ng releases the GIL during each call.
INFLATE_INPUT_SLICE = 64 * 1024
INFLATE_OUTPUT_SLICE = 256 * 1024


# zlib_ng.pyi declares `error: Exception` (an instance); at run time it is the exception class.
_InflateError = cast("type[Exception]", zlib_ng.error)


class PixelDataError(ValueError):
    """The PNG's compressed rows are broken; the message says how."""


@dataclass(frozen=True, slots=True)
class RowPlan:
    """What the image data must inflate to: (rows, bytes per row with its filter byte) for
    each pass that has pixels (one pass unless interlaced), and the IDAT chunks' bodies."""

    passes: tuple[tuple[int, int], ...]
    chunks: tuple[memoryview, ...]

    @property
    def total(self) -> int:
        return sum(rows * stride for rows, stride in self.passes)


def rows_to_check(data: bytes) -> RowPlan | None:
    """The plan for `data`, a PNG that verify() accepted; None when the file is one this
    check leaves to a full decode (see the module's docstring)."""
    if not data.startswith(_SIGNATURE) or data[12:16] != b"IHDR" or len(data) < 33:
        return None
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    depth, colour, interlaced = data[24], data[25], data[28] != 0
    if colour not in _CHANNELS or depth not in (1, 2, 4, 8, 16):
        return None
    bits = depth * _CHANNELS[colour]
    chunks = _image_chunks(data)
    if chunks is None:
        return None
    return RowPlan(_passes(width, height, bits, interlaced), chunks)


def check_rows(plan: RowPlan) -> None:
    """PixelDataError unless the chunks inflate to every row, each with a known filter."""
    passes = iter(plan.passes)
    rows_left, stride = next(passes)
    total = plan.total
    inflater = zlib_ng.decompressobj()
    produced = 0  # bytes inflated so far
    next_row = 0  # offset of the next row's filter byte
    try:
        for piece in _slices(plan.chunks):
            pending: bytes | memoryview = piece
            while pending:
                want = total - produced if produced < total else 1
                out = inflater.decompress(pending, min(want, INFLATE_OUTPUT_SLICE))
                pending = inflater.unconsumed_tail
                if produced >= total:
                    if out:
                        return  # more data than rows: decoders ignore it, and so does this
                    continue
                end = produced + len(out)
                while next_row < end:
                    kind = out[next_row - produced]
                    if kind > _MAX_FILTER:
                        raise PixelDataError(f"a row has the unknown filter type {kind}")
                    next_row += stride
                    rows_left -= 1
                    if not rows_left:
                        rows_left, stride = next(passes, (0, 0))
                produced = end
                if inflater.eof:
                    break
            if inflater.eof:
                break
    except _InflateError as exc:
        raise PixelDataError(f"its compressed data is corrupt ({exc})") from None
    if produced < total:
        raise PixelDataError(f"its pixel data ends after {produced:,} of {total:,} bytes")


def _image_chunks(data: bytes) -> tuple[memoryview, ...] | None:
    """The bodies of the first run of IDAT chunks, which is what decoders read as the image;
    None for an APNG or when another chunk than IEND follows the run."""
    view = memoryview(data)  # the bodies are views: no copy of the image data
    chunks: list[memoryview] = []
    position = len(_SIGNATURE)
    while position + 12 <= len(data):
        length = int.from_bytes(data[position : position + 4], "big")
        kind = data[position + 4 : position + 8]
        body = position + 8
        if body + length + 4 > len(data):
            return None
        if kind == b"acTL":
            return None
        if kind == b"IDAT":
            chunks.append(view[body : body + length])
        elif chunks:
            return tuple(chunks) if kind == b"IEND" else None
        position = body + length + 4  # the CRC, which verify() checked
    return None


def _passes(width: int, height: int, bits: int, interlaced: bool) -> tuple[tuple[int, int], ...]:
    if not interlaced:
        return ((height, 1 + (width * bits + 7) // 8),)
    passes = []
    for first_column, column_step, first_row, row_step in _ADAM7:
        columns = max(0, (width - first_column + column_step - 1) // column_step)
        rows = max(0, (height - first_row + row_step - 1) // row_step)
        if columns and rows:  # an empty pass has no bytes, not even filter bytes
            passes.append((rows, 1 + (columns * bits + 7) // 8))
    return tuple(passes)


def _slices(chunks: tuple[memoryview, ...]) -> list[memoryview]:
    return [
        chunk[offset : offset + INFLATE_INPUT_SLICE]
        for chunk in chunks
        for offset in range(0, len(chunk), INFLATE_INPUT_SLICE)
    ]
