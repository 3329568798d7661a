"""The PNG pixel-data check (inflate the rows, read each filter byte) refuses every file that
Pillow's full decode refuses, without decoding a pixel."""

from __future__ import annotations

import io
import random
import zlib

import pytest
from PIL import Image, ImageFile

from gateway.media import png
from gateway.media.check import ImagePolicy, check_image
from gateway.media.errors import MediaError
from gateway.media.png import (
    INFLATE_OUTPUT_SLICE,
    PixelDataError,
    RowPlan,
    check_rows,
    rows_to_check,
)
from tests.gateway.media import images

WHERE = "messages.0.content.0"
POLICY = ImagePolicy(
    formats=frozenset({"PNG", "JPEG", "WEBP", "GIF"}),
    max_pixels=40_000_000,
    max_aspect_ratio=200.0,
    engine_max_pixels=1_254_400,
    full_decode=True,
    exif_transpose=False,
)
# (bit depth, colour type): every combination PNG allows.
COMBOS = [(1, 0), (2, 0), (4, 0), (8, 0), (16, 0), (8, 2), (16, 2), (1, 3), (2, 3), (4, 3),
          (8, 3), (8, 4), (16, 4), (8, 6), (16, 6)]  # fmt: skip
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
# Adam7 passes: (first column, column step, first row, row step).
ADAM7 = [(0, 8, 0, 8), (4, 8, 0, 8), (0, 4, 4, 8), (2, 4, 0, 4), (0, 2, 2, 4), (1, 2, 0, 2),
         (0, 1, 1, 2)]  # fmt: skip


def _passes(width: int, height: int, bits: int, interlaced: bool) -> list[tuple[int, int]]:
    """(rows, bytes per row with the filter byte) per pass, written from the spec here rather
    than taken from the module under test."""
    if not interlaced:
        return [(height, 1 + (width * bits + 7) // 8)]
    found = []
    for x0, dx, y0, dy in ADAM7:
        columns = len(range(x0, width, dx))
        rows = len(range(y0, height, dy))
        if columns and rows:
            found.append((rows, 1 + (columns * bits + 7) // 8))
    return found


def _pillow_refuses(data: bytes) -> bool:
    """Pillow's verdict: open, verify() and a full decode, as the check did before."""
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as image:
            image.verify()
        with Image.open(io.BytesIO(data), formats=["PNG"]) as image:
            image.load()
    except Exception:
        return True
    return False


def _refused(data: bytes) -> str | None:
    """The refusal's message (always a bad_image), or None when the image passes."""
    try:
        check_image(data, POLICY, WHERE)
    except MediaError as error:
        reason, message = error.reason, error.message
    else:
        return None
    assert reason == "bad_image", message
    return message


def _random_png(rng: random.Random, kind: str) -> bytes:
    width, height = rng.randint(1, 40), rng.randint(1, 40)
    depth, colour = rng.choice(COMBOS)
    interlaced = rng.random() < 0.4
    passes = _passes(width, height, depth * CHANNELS[colour], interlaced)
    raw = bytearray()
    row_starts = []
    for rows, stride in passes:
        for _ in range(rows):
            row_starts.append(len(raw))
            raw.append(rng.randrange(5))
            raw += rng.randbytes(stride - 1)
    if kind == "bad filter":
        raw[rng.choice(row_starts)] = rng.randrange(5, 256)
    elif kind == "short stream":
        raw = raw[: rng.randrange(len(raw))]
    elif kind == "extra data":
        raw += rng.randbytes(rng.randint(1, 50))
    stream = bytearray(zlib.compress(bytes(raw), rng.choice([0, 1, 6, 9])))
    if kind == "cut stream":
        stream = stream[: rng.randrange(1, len(stream))]
    elif kind == "bit flips":
        for _ in range(rng.randint(1, 3)):
            stream[rng.randrange(len(stream))] ^= 1 << rng.randrange(8)
    bodies: list[bytes] = []
    position = 0
    while position < len(stream):
        size = rng.randint(0, max(1, len(stream) // 2))  # empty IDAT chunks are allowed
        bodies.append(bytes(stream[position : position + size]))
        position += size
    palette = images.png_chunk(b"PLTE", rng.randbytes(3 << depth)) if colour == 3 else b""
    after = images.png_chunk(b"tEXt", b"note\0after the pixels") if kind == "chunk after" else b""
    data = images.png_file(
        width, height, bodies, depth=depth, colour=colour, interlaced=interlaced,
        before_idat=palette, after_idat=after,
    )  # fmt: skip
    if kind == "chunk inside the run" and len(bodies) > 1:
        # A text chunk between two IDATs ends the image data for every decoder.
        split = data.index(images.png_chunk(b"IDAT", bodies[-1]))
        data = data[:split] + images.png_chunk(b"tEXt", b"k\0v") + data[split:]
    return data


KINDS = ["valid", "bad filter", "short stream", "extra data", "cut stream", "bit flips",
         "chunk after", "chunk inside the run"]  # fmt: skip


def test_refuses_whatever_pillows_full_decode_refuses() -> None:
    """Random PNGs of every bit depth and colour type, interlaced or not, in random IDAT
    splits, broken every way the compressed rows can be (CRCs always valid: verify() passes).
    Pillow refuses => we refuse. We refuse where Pillow keeps the image only for three kinds of
    broken file: a zlib stream that ends early on a row boundary (Pillow fills black rows;
    libpng refuses), a wrong zlib checksum, and corrupt data after the last row (Pillow stops
    reading at the last row)."""
    rng = random.Random(21)
    stricter: dict[str, int] = {}
    for _ in range(800):
        kind = rng.choice(KINDS)
        data = _random_png(rng, kind)
        ours, pillows = _refused(data), _pillow_refuses(data)
        if pillows:
            assert ours is not None, kind
        elif ours is not None:
            assert kind in ("short stream", "bit flips"), (kind, ours)
            if kind == "bit flips":
                assert "compressed data is corrupt" in ours, ours
            stricter[kind] = stricter.get(kind, 0) + 1
        if kind in ("valid", "extra data", "chunk after"):
            assert ours is None, (kind, ours)
        if kind == "bad filter":
            assert ours is not None
    assert sum(stricter.values()) < 60  # the exceptions stay exceptions


def test_a_short_stream_is_refused_even_on_a_row_boundary() -> None:
    width, height = 10, 6
    raw = (b"\0" + bytes(3 * width)) * height
    whole = images.png_file(width, height, [zlib.compress(raw)])
    assert _refused(whole) is None
    four_rows = images.png_file(width, height, [zlib.compress(raw[: 4 * (1 + 3 * width)])])
    message = _refused(four_rows)
    assert message is not None
    assert "pixel data ends after 124 of 186 bytes" in message


def test_a_row_with_an_unknown_filter_is_refused() -> None:
    raw = bytearray((b"\0" + bytes(6)) * 3)
    raw[7] = 5  # the second row's filter type
    message = _refused(images.png_file(2, 3, [zlib.compress(bytes(raw))]))
    assert message is not None
    assert "unknown filter type 5" in message


def test_a_truncated_png_is_refused() -> None:
    data = images.png(300, 200)
    # The last 12 bytes are IEND, whose CRC nothing checks (a file missing only that is whole).
    for cut in (40, len(data) // 3, len(data) // 2, len(data) - 13, len(data) - 12):
        assert _refused(data[:cut]) is not None, cut


def test_interlaced_pngs_are_checked_pass_by_pass() -> None:
    width, height = 13, 11
    raw = b"".join((b"\1" + bytes(stride - 1)) * rows for rows, stride in
                   _passes(width, height, 24, interlaced=True))  # fmt: skip
    data = images.png_file(width, height, [zlib.compress(raw)], interlaced=True)
    assert _refused(data) is None
    with Image.open(io.BytesIO(data)) as image:
        image.load()  # Pillow agrees it is a whole image
    cut = images.png_file(width, height, [zlib.compress(raw[:-1])], interlaced=True)
    assert _refused(cut) is not None


def test_the_check_never_decodes_pixels(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decode(self: ImageFile.ImageFile) -> None:
        raise AssertionError("decoded")

    data = images.png(640, 480)
    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decode)
    assert check_image(data, POLICY, WHERE).width == 640


def test_files_a_full_decode_still_checks() -> None:
    # An APNG: its frames are pixel data too.
    frames = [images.picture(30, 20).rotate(40 * i) for i in range(3)]
    out = io.BytesIO()
    frames[0].save(out, format="PNG", save_all=True, append_images=frames[1:])
    assert rows_to_check(out.getvalue()) is None
    assert _refused(out.getvalue()) is None
    # A chunk after the image data: Pillow parses it once the pixels are read.
    text = images.png_chunk(b"tEXt", b"k\0v")
    raw = (b"\0" + bytes(6)) * 2
    after = images.png_file(2, 2, [zlib.compress(raw)], after_idat=text)
    assert rows_to_check(after) is None
    assert _refused(after) is None
    assert rows_to_check(images.png_file(2, 2, [zlib.compress(raw)])) is not None


def test_a_highly_compressed_png_is_inflated_in_bounded_slices() -> None:
    plan = rows_to_check(images.png_blank(6000, 6000))  # 36 Mpx in a few KB
    assert plan is not None
    assert plan.total == 6000 * (1 + 750)
    check_rows(plan)
    short = RowPlan((*plan.passes[:1], (1, 1)), plan.chunks)
    with pytest.raises(PixelDataError, match="ends after"):
        check_rows(short)


def _broken_stream(rng: random.Random, raw: bytes) -> bytes:
    """raw deflated with random settings, then broken one way or another (or not at all)."""
    deflater = zlib.compressobj(
        rng.choice([0, 1, 6, 9]), zlib.DEFLATED, rng.choice([9, 12, 15]),
        rng.randint(1, 9), rng.choice([zlib.Z_DEFAULT_STRATEGY, zlib.Z_FILTERED,
                                       zlib.Z_HUFFMAN_ONLY, zlib.Z_RLE, zlib.Z_FIXED]),
    )  # fmt: skip
    stream = bytearray(deflater.compress(raw) + deflater.flush())
    kind = rng.choice(["valid", "cut", "bit flips", "a byte", "header", "checksum", "extra"])
    if kind == "cut":
        del stream[rng.randrange(len(stream)) :]
    elif kind == "bit flips":
        for _ in range(rng.randint(1, 3)):
            stream[rng.randrange(len(stream))] ^= 1 << rng.randrange(8)
    elif kind == "a byte":
        stream[rng.randrange(len(stream))] = rng.randrange(256)
    elif kind == "header":
        # Any method, window size and preset-dictionary flag, most with a valid FCHECK: a
        # decoder that skipped a header check would keep what zlib refuses.
        method = 8 if rng.random() < 0.8 else rng.randrange(16)  # 8: deflate
        stream[0], flags = rng.randrange(16) << 4 | method, rng.randrange(256) & 0xE0
        stream[1] = flags | (-((stream[0] << 8) | flags) % 31 if rng.random() < 0.8 else 0)
    elif kind == "checksum":
        stream[-rng.randint(1, 4)] ^= 1 << rng.randrange(8)
    elif kind == "extra":
        stream += rng.randbytes(rng.randint(1, 40))
    return bytes(stream)


def _outcome(plan: RowPlan) -> str | None:
    try:
        check_rows(plan)
    except PixelDataError as error:
        return str(error)
    return None


def test_zlib_ng_gives_stdlib_zlibs_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check inflates with zlib-ng (faster); on every kind of broken stream, in random
    IDAT splits and sizes that cross the input and output slices, it refuses exactly what it
    refused with stdlib zlib (what it used before), with the same message."""
    rng = random.Random(2021)
    for _ in range(400):
        stride = rng.randint(1, 3000)
        rows = rng.randint(1, 400)
        raw = bytearray()
        for _ in range(rows):
            raw.append(rng.randrange(5))
            raw += rng.randbytes(stride - 1) if rng.random() < 0.3 else bytes(stride - 1)
        cut = rng.choice([len(raw), len(raw), rng.randrange(len(raw) + 1)])
        stream = _broken_stream(rng, bytes(raw[:cut]))
        bodies, position = [], 0
        while position < len(stream):
            size = rng.randint(0, max(1, len(stream) // rng.choice([1, 2, 5])))
            bodies.append(memoryview(stream)[position : position + size])
            position += size
        plan = RowPlan(((rows, stride),), tuple(bodies))
        ours = _outcome(plan)
        with monkeypatch.context() as patched:
            patched.setattr(png, "zlib_ng", zlib)
            patched.setattr(png, "_InflateError", zlib.error)
            stdlib = _outcome(plan)
        assert ours == stdlib, (ours, stdlib)
    # Blank rows just past an output slice, the rest of them in the stream's last few bytes:
    # an inflater that takes input into a buffer of its own (python-isal) leaves no
    # unconsumed_tail while output is still due, and the check would refuse a whole image.
    for extra in (1, 258, 1000):
        blank = zlib.compress(bytes(INFLATE_OUTPUT_SLICE + extra), 9)
        check_rows(RowPlan(((1, INFLATE_OUTPUT_SLICE + extra),), (memoryview(blank),)))
