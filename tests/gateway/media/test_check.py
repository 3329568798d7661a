"""Pillow checks on bytes: formats, the header size before decoding, aspect ratio,
truncation, GIF's first frame, EXIF orientation, and the data URL sent to the engine."""

from __future__ import annotations

import base64
import hashlib
import io
import random
from dataclasses import replace

import pytest
from PIL import Image

from gateway.media.check import (
    ImagePolicy,
    check_image,
    encode_data_url,
    sniff_format,
)
from gateway.media.data_url import parse_data_url
from gateway.media.errors import MediaError
from gateway.media.tokens import AspectRatioError, smart_resize
from tests.gateway.media import images

WHERE = "messages.0.content.1"
POLICY = ImagePolicy(
    formats=frozenset({"PNG", "JPEG", "WEBP", "GIF"}),
    max_pixels=40_000_000,
    max_aspect_ratio=200.0,
    engine_max_pixels=1_254_400,
    full_decode=True,
    exif_transpose=False,
)


def _refused(reason: str, data: bytes, policy: ImagePolicy = POLICY) -> MediaError:
    with pytest.raises(MediaError) as caught:
        check_image(data, policy, WHERE)
    assert caught.value.reason == reason, caught.value.message
    assert caught.value.param == WHERE
    return caught.value


def _decoded(data_url: str) -> bytes:
    return base64.b64decode(data_url.split(",", 1)[1], validate=True)


@pytest.mark.parametrize(
    ("make", "subtype"),
    [(images.png, "png"), (images.jpeg, "jpeg"), (images.webp, "webp")],
)
def test_valid_images_pass_through_unchanged(make: object, subtype: str) -> None:
    data = make(320, 200)  # type: ignore[operator]
    checked = check_image(data, POLICY, WHERE)
    assert (checked.width, checked.height, checked.format) == (320, 200, subtype)
    assert checked.data_url.startswith(f"data:image/{subtype};base64,")
    assert checked.digest == hashlib.sha256(data).hexdigest()
    sent = _decoded(checked.data_url)
    assert sent[: len(data)] == data
    assert checked.size == len(sent)
    # 320x200 -> smart_resize 308x196 = 77 tokens, plus the two markers.
    assert checked.tokens == 77 + 2


def test_gif_is_sent_as_its_first_frame_in_png() -> None:
    data = images.gif(90, 60, frames=4)
    checked = check_image(data, POLICY, WHERE)
    assert checked.format == "png"
    assert checked.data_url.startswith("data:image/png;base64,")
    assert checked.digest == hashlib.sha256(data).hexdigest()  # the client's bytes
    with Image.open(io.BytesIO(_decoded(checked.data_url))) as sent:
        assert sent.format == "PNG"
        assert sent.size == (90, 60)
        assert getattr(sent, "n_frames", 1) == 1
        with Image.open(io.BytesIO(data)) as original:
            assert getattr(original, "n_frames", 1) == 4
            assert sent.convert("RGB").tobytes() == original.convert("RGB").tobytes()


def test_formats_outside_the_list_are_refused() -> None:
    bmp = images.encode(images.picture(16, 16), "BMP")
    assert "not an image format we read" in _refused("unsupported_image_format", bmp).message
    tiff = images.encode(images.picture(16, 16), "TIFF")
    _refused("unsupported_image_format", tiff)
    _refused("unsupported_image_format", b"<svg xmlns='http://www.w3.org/2000/svg'/>")
    _refused("unsupported_image_format", b"")
    only_png = replace(POLICY, formats=frozenset({"PNG"}))
    error = _refused("unsupported_image_format", images.jpeg(), only_png)
    assert "JPEG" in error.message
    assert "PNG" in error.message


def test_a_decompression_bomb_is_refused_from_its_header() -> None:
    # 100,000 x 100,000 declared in 69 bytes: past Pillow's own guard too.
    bomb = images.png_header_only(100_000, 100_000)
    assert len(bomb) < 100
    _refused("image_too_many_pixels", bomb)
    # 8,000 x 8,000 = 64 Mpx: under Pillow's guard, over ours (40 Mpx); never decoded.
    error = _refused("image_too_many_pixels", images.png_header_only(8_000, 8_000))
    assert "8000x8000" in error.message
    assert "40,000,000" in error.message


def test_the_pixel_bound_is_per_call_not_global() -> None:
    before = Image.MAX_IMAGE_PIXELS
    small = replace(POLICY, max_pixels=1000)
    _refused("image_too_many_pixels", images.png(40, 40), small)
    assert check_image(images.png(40, 40), POLICY, WHERE).width == 40
    assert before == Image.MAX_IMAGE_PIXELS


def test_aspect_ratio_over_200_is_refused() -> None:
    _refused("image_aspect_ratio", images.png_header_only(30_000, 100))  # 300, never decoded
    assert check_image(images.png(4000, 20), POLICY, WHERE).tokens > 0  # exactly 200
    error = _refused("image_aspect_ratio", images.png(4020, 20))
    assert "4020x20" in error.message
    assert "201.0" in error.message
    tight = replace(POLICY, max_aspect_ratio=4.0)
    _refused("image_aspect_ratio", images.png(50, 10), tight)


def test_our_ratio_check_is_at_least_as_strict_as_the_engines() -> None:
    """The engine scales a side under 28 up before its own check; whatever it refuses, the
    check on the raw size refuses too (so the engine never raises on a checked image)."""
    for short in range(1, 60):
        for long in range(195 * short, 206 * short + 1, max(1, short // 3)):
            raw_refused = long / short > 200
            try:
                smart_resize(short, long, max_pixels=1_254_400)
                smart_resize(long, short, max_pixels=1_254_400)
            except AspectRatioError:
                assert raw_refused, (short, long)


@pytest.mark.parametrize(
    "make", [images.png, images.jpeg, images.webp, images.gif], ids=["png", "jpeg", "webp", "gif"]
)
def test_truncated_files_are_refused(make: object) -> None:
    # A GIF's later frames are never decoded (the engine sees the first): cut a one-frame GIF.
    data = images.gif(200, 150, frames=1) if make is images.gif else make(200, 150)  # type: ignore[operator]
    for cut in (len(data) // 2, len(data) - 8):
        _refused("bad_image", data[:cut])


def test_corrupt_png_fails_verify() -> None:
    data = bytearray(images.png(100, 100))
    data[60] ^= 0xFF  # inside IDAT: its CRC no longer matches
    _refused("bad_image", bytes(data))


def test_garbage_after_a_magic_number_is_refused() -> None:
    for magic in (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff\xe0", b"GIF89a", b"RIFF\0\0\0\0WEBP"):
        _refused("bad_image", magic + bytes(range(256)) * 4)


def test_trailing_byte_is_ignored_by_every_format() -> None:
    """The data URL suffix guard appends one byte; every decoder must read past it."""
    for make in (images.png, images.jpeg, images.webp, images.gif):
        data = make(33, 21) + b"\0"
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            assert image.size == (33, 21)
        assert check_image(data, POLICY, WHERE).width == 33


def test_data_url_never_ends_like_a_file_path() -> None:
    # sglang-kt's load_image opens any string ending in png/jpg/jpeg/webp/gif as a local path,
    # before its data-URL branch. Build bytes whose plain base64 ends in each suffix.
    base = images.png(8, 8)
    base += b"\0" * (-len(base) % 3)  # aligned: the last 3 bytes make the last 4 characters
    for tail in ("aPNG", "ajpg", "jpeg", "webp", "aGiF", "AAAA"):
        data = base + base64.b64decode(tail)
        assert base64.b64encode(data).decode().endswith(tail)
        checked = check_image(data, POLICY, WHERE)
        assert not checked.data_url.lower().endswith(("png", "jpg", "jpeg", "webp", "gif"))
        assert checked.digest == hashlib.sha256(data).hexdigest()
        if tail == "AAAA":
            assert checked.size == len(data)  # untouched when the end is harmless
        else:
            assert checked.data_url.endswith("==")
            assert checked.size == len(data) + 1
        with Image.open(io.BytesIO(_decoded(checked.data_url))) as sent:
            sent.load()
            assert sent.size == (8, 8)


def test_the_clients_data_url_is_reused_only_when_it_is_the_canonical_encoding() -> None:
    data = images.png(50, 40)
    data += b"\0" * ((1 - len(data)) % 3)  # one byte in the last group: 4 spare bits
    canonical = images.data_url(data)
    parsed = parse_data_url(canonical, WHERE)
    checked = check_image(data, POLICY, WHERE, sent_as=parsed)
    assert checked.data_url is canonical
    # The same bytes with a spare bit set in the last group: strict base64 still decodes it.
    sloppy = canonical[:-3] + chr(ord(canonical[-3]) + 1) + "=="
    assert base64.b64decode(sloppy.split(",")[1], validate=True) == data
    rebuilt = check_image(data, POLICY, WHERE, sent_as=parse_data_url(sloppy, WHERE))
    assert rebuilt.data_url == canonical
    # Another spelling of the type is rebuilt too.
    jpg = check_image(
        data, POLICY, WHERE, sent_as=parse_data_url(canonical.upper()[:15] + canonical[15:], WHERE)
    )
    assert jpg.data_url == canonical


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 65_535, 65_536, 3 * 65_536 + 2])
def test_encoding_is_standard_base64(size: int) -> None:
    data = random.Random(size).randbytes(size)
    assert encode_data_url("p,", data) == "p," + base64.b64encode(data).decode()


def test_exif_orientation_is_applied_only_when_configured() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    data = images.jpeg(120, 80, exif=exif.tobytes())
    plain = check_image(data, POLICY, WHERE)
    assert (plain.format, plain.width, plain.height) == ("jpeg", 120, 80)
    turned = check_image(data, replace(POLICY, exif_transpose=True), WHERE)
    assert (turned.format, turned.width, turned.height) == ("png", 80, 120)
    assert turned.tokens == plain.tokens


def test_without_full_decode_bytes_are_not_decoded() -> None:
    lazy = replace(POLICY, full_decode=False)
    data = images.jpeg(200, 150)
    assert check_image(data[: len(data) // 2], lazy, WHERE).width == 200  # header only
    assert check_image(images.gif(), lazy, WHERE).format == "png"  # GIF: always re-encoded


def test_sniffing() -> None:
    assert sniff_format(images.png()) == "PNG"
    assert sniff_format(images.jpeg()) == "JPEG"
    assert sniff_format(images.webp()) == "WEBP"
    assert sniff_format(images.gif()) == "GIF"
    assert sniff_format(b"RIFF\0\0\0\0WAVE") is None


def _pillow_decode_refuses(data: bytes) -> bool:
    try:
        with Image.open(io.BytesIO(data), formats=["JPEG"]) as image:
            image.load()
    except Exception:
        return True
    return False


def test_a_jpeg_is_checked_at_one_eighth_scale_with_the_full_decodes_verdict() -> None:
    """The JPEG check decodes at 1/8 scale, which still reads every entropy-coded byte:
    truncations, bit flips and splices of baseline, progressive, 4:4:4, grey and CMYK files
    get the same verdict as a full decode."""
    rng = random.Random(8)
    seeds = [
        images.jpeg(64, 48),
        images.jpeg(200, 150),
        images.jpeg(200, 150, progressive=True),
        images.jpeg(37, 23, subsampling=0),
        images.encode(images.picture(120, 90, "L"), "JPEG"),
        images.encode(images.picture(120, 90).convert("CMYK"), "JPEG"),
    ]
    refused = 0
    for _ in range(400):
        data = bytearray(rng.choice(seeds))
        action = rng.randrange(3)
        if action == 0:
            del data[rng.randrange(2, len(data)) :]
        elif action == 1:
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            start = rng.randrange(len(data))
            data[start:start] = rng.randbytes(rng.randint(1, 40))
        verdicts = []
        for policy in (POLICY, replace(POLICY, full_decode=False)):
            try:
                check_image(bytes(data), policy, WHERE)
                verdicts.append(False)
            except MediaError:
                verdicts.append(True)
        ours, header_only = verdicts
        assert ours == (header_only or _pillow_decode_refuses(bytes(data)))
        refused += ours
    assert refused > 100


def test_a_truncated_jpeg_is_refused() -> None:
    for data in (images.jpeg(320, 240), images.jpeg(320, 240, progressive=True)):
        for cut in (len(data) // 2, len(data) - 200, len(data) - 2):
            error = _refused("bad_image", data[:cut])
            assert "truncated" in error.message


@pytest.mark.parametrize("subtype", ["png", "jpeg", "webp"])
def test_the_engine_gets_the_canonical_encoding_of_the_checked_bytes(subtype: str) -> None:
    """Whatever spelling of the same bytes a client sends (the spare bits of the last base64
    group, the type's case), the data URL sent on is exactly prefix + b64encode(bytes); the
    client's own string is passed on (not copied) only when it is that string already."""
    make = {"png": images.png, "jpeg": images.jpeg, "webp": images.webp}[subtype]
    rng = random.Random(subtype)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    respelled = 0
    for _ in range(40):
        # Bytes after the image's end are ignored by every decoder: any length mod 3.
        data = make(rng.randint(8, 40), rng.randint(8, 40)) + rng.randbytes(rng.randint(1, 5))
        canonical = f"data:image/{subtype};base64," + base64.b64encode(data).decode()
        if canonical.lower().endswith(("png", "jpg", "jpeg", "webp", "gif")):
            continue  # the path-suffix guard appends a byte (its own test)
        variants = {canonical, canonical.replace(f"image/{subtype}", f"IMAGE/{subtype.upper()}")}
        head, last = canonical[:-4], canonical[-4:]
        for char in alphabet:  # every last group that strict base64 decodes to the same bytes
            for group in (char + last[1:], last[0] + char + last[2:], last[:2] + char + last[3]):
                try:
                    same = base64.b64decode(group, validate=True) == base64.b64decode(last)
                except ValueError:
                    same = False
                if same:
                    variants.add(head + group)
        for variant in variants:
            checked = check_image(data, POLICY, WHERE, sent_as=parse_data_url(variant, WHERE))
            assert checked.data_url == canonical
            assert (checked.data_url is variant) == (variant == canonical)
            assert _decoded(checked.data_url) == data
            respelled += variant != canonical
    assert respelled > 100
