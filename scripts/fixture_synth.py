"""Synthetic text and ids of the same length and shape, for recorded agent requests.

scripts/record_claude_code_fixtures.py and scripts/record_codex_fixtures.py rewrite the
requests a real CLI sent with these before they are committed as fixtures:

- `synth_text`: every word becomes a made-up word of the same length and case; digits,
  punctuation, whitespace and tags such as `<system-reminder>` stay;
- `synth_id`: hex stays hex of the same length, other characters and a UUID's version and
  variant nibbles stay; `synth_uuids` does that to every UUID inside a string;
- `synth_schema` (descriptions in a JSON schema) and `synth_values` (every string in a tree).

Words and ids map through a keyed hash, so equal text stays equal across requests (shared
prefixes stay shared) and the original cannot be read back. `write_fixtures` sanitizes a folder
of raw records into a fixture folder and refuses to write one that still holds a leak.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

# The key of the hash; changing it changes every committed fixture word on re-recording.
SALT = b"flashbox-claude-code-fixtures"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
UUID_IN_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TAG = re.compile(r"(</?[A-Za-z][A-Za-z0-9_-]*>)")
WORD = re.compile(r"[A-Za-z]+")
HEX = "0123456789abcdef"
CONSONANTS = "bcdfghjklmnpqrstvwxz"
VOWELS = "aeiou"
Record = dict[str, Any]


def _digest(text: str) -> bytes:
    return hashlib.sha256(SALT + text.encode()).digest()


def _stream(text: str, length: int) -> bytes:
    out = b""
    counter = 0
    while len(out) < length:
        out += _digest(f"{counter}:{text}")
        counter += 1
    return out[:length]


def synth_word(word: str) -> str:
    """A synthetic word of the same length and case pattern."""
    letters = [
        (VOWELS[b % len(VOWELS)] if i % 2 else CONSONANTS[b % len(CONSONANTS)])
        for i, b in enumerate(_stream(word, len(word)))
    ]
    cased = (new.upper() if old.isupper() else new for old, new in zip(word, letters, strict=True))
    return "".join(cased)


def synth_text(text: str) -> str:
    """Every word replaced; whitespace, digits, punctuation and tags like <name> kept."""
    parts = TAG.split(text)
    return "".join(
        part if i % 2 else WORD.sub(lambda m: synth_word(m.group()), part)
        for i, part in enumerate(parts)
    )


def synth_id(value: str, keep: Collection[int] = ()) -> str:
    """A synthetic id in the same format: hex stays hex, other characters, the positions in
    `keep` and a UUID's version and variant nibbles stay."""
    raw = _stream("id:" + value, len(value))
    fixed = {14, 19} | set(keep) if UUID.match(value) else set(keep)
    return "".join(
        ch if i in fixed or ch not in HEX else HEX[b % 16]
        for i, (ch, b) in enumerate(zip(value, raw, strict=True))
    )


def synth_uuids(text: str) -> str:
    """Every UUID inside text replaced by its synth_id; the rest kept."""
    return UUID_IN_TEXT.sub(lambda m: synth_id(m.group()), text)


def synth_schema(node: Any) -> Any:
    """A JSON schema with every `description` string made synthetic; all else kept."""
    if isinstance(node, dict):
        return {
            key: synth_text(value)
            if key == "description" and isinstance(value, str)
            else synth_schema(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [synth_schema(item) for item in node]
    return node


def synth_values(node: Any) -> Any:
    """Keys kept, every string value made synthetic (tool inputs)."""
    if isinstance(node, str):
        return synth_text(node)
    if isinstance(node, dict):
        return {key: synth_values(value) for key, value in node.items()}
    if isinstance(node, list):
        return [synth_values(item) for item in node]
    return node


def check_no_leaks(text: str, needles: Iterable[str]) -> None:
    for needle in needles:
        if needle and needle in text:
            raise SystemExit(f"a fixture still contains {needle!r}")


def write_fixtures(
    raw: Path, target: Path, sanitize: Callable[[Record], Record], needles: Iterable[str]
) -> list[Record]:
    """Replace `target` with the sanitized form of every record in `raw`, same file names."""
    # A path under HOME, not HOME itself: Codex names its root agent "/root", whoever runs it.
    needles = [*needles, f"{Path.home()}/"]
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    written = []
    for path in sorted(raw.glob("*.json")):
        record = sanitize(json.loads(path.read_text()))
        text = json.dumps(record, indent=1, ensure_ascii=False) + "\n"
        check_no_leaks(text, needles)
        (target / path.name).write_text(text)
        print(f"  {target.name}/{path.name}: {record['method']} {record['path']}")
        written.append(record)
    return written


def record_all(
    description: str,
    default_out: Path,
    scenarios: Sequence[str],
    record: Callable[[str, Path], Path],
    sanitize: Callable[[Record], Record],
    secret: str,
) -> int:
    """The recording scripts' command line: record each scenario into a scratch folder (`record`
    returns the folder of raw records), then write its sanitized fixtures under --out."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--keep-raw", type=Path, help="also copy the unsanitized records here")
    args = parser.parse_args()
    for name in scenarios:
        with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
            scratch = Path(tmp)
            raw = record(name, scratch)
            if args.keep_raw:
                shutil.copytree(raw, args.keep_raw / name, dirs_exist_ok=True)
            write_fixtures(raw, args.out / name, sanitize, (str(scratch), secret))
    print(f"fixtures in {args.out}")
    return 0
