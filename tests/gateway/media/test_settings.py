"""The media section of the settings: the YAML file, defaults, environment, bounds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from gateway.settings import DEFAULT_CONFIG, MediaSettings, Settings


def test_the_shipped_yaml_states_every_default() -> None:
    shipped = yaml.safe_load(Path(DEFAULT_CONFIG).read_text())["media"]
    assert MediaSettings(**shipped) == MediaSettings()
    assert set(shipped) == set(MediaSettings.model_fields)
    assert set(shipped["remote"]) == set(type(MediaSettings().remote).model_fields)


def test_defaults_match_the_design() -> None:
    media = Settings(engines=["http://e:1"]).media
    assert (media.max_images, media.max_image_bytes, media.max_request_bytes) == (
        8, 10 * 1024 * 1024, 32 * 1024 * 1024,
    )  # fmt: skip
    assert (media.max_decoded_pixels, media.max_aspect_ratio) == (40_000_000, 200.0)
    assert media.engine_max_pixels == 6_272_000  # the engine's own default
    assert media.max_request_image_tokens == 8 * 4002
    remote = media.remote
    assert not remote.enabled
    assert not remote.allow_http
    assert not remote.allow_redirects
    assert (remote.connect_timeout_s, remote.total_timeout_s) == (3.0, 10.0)
    assert remote.allowed_hosts == []


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHBOX_MEDIA__REMOTE__ENABLED", "true")
    monkeypatch.setenv("FLASHBOX_MEDIA__REMOTE__ALLOWED_HOSTS", '["img.example.com"]')
    monkeypatch.setenv("FLASHBOX_MEDIA__ENGINE_MAX_PIXELS", "6272000")
    media = Settings().media
    assert media.remote.enabled
    assert media.remote.allowed_hosts == ["img.example.com"]
    assert media.engine_max_pixels == 6_272_000


@pytest.mark.parametrize(
    "fields",
    [
        {"max_images": 9},  # the engine refuses more
        {"max_aspect_ratio": 201},  # the engine's smart_resize raises above 200
        {"engine_max_pixels": 12_543},  # the engine's own range
        {"engine_max_pixels": 6_272_001},
        {"max_decoded_pixels": 100_000_000},  # past Pillow's process-wide guard
        {"formats": ["BMP"]},
        {"formats": []},
        {"unknown": 1},
    ],
)
def test_out_of_range_settings_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        MediaSettings(**fields)
