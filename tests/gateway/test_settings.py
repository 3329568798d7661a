"""Settings: YAML file, then FLASHBOX_* environment, then arguments."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.settings import Settings


def test_repo_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLASHBOX_CONFIG", raising=False)
    settings = Settings()
    assert settings.port == 8080
    assert settings.model.stop == ["<|user|>", "<|observation|>"]
    assert settings.upstream.max_connections > 100


def test_environment_overrides_yaml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "gw.yaml"
    config.write_text("port: 9000\nengines: [http://a:1]\nlimits:\n  max_tools: 7\n")
    monkeypatch.setenv("FLASHBOX_CONFIG", str(config))
    assert Settings().port == 9000
    assert Settings().limits.max_tools == 7
    monkeypatch.setenv("FLASHBOX_ENGINES", "http://x:1, http://y:2/")
    monkeypatch.setenv("FLASHBOX_PORT", "8181")
    monkeypatch.setenv("FLASHBOX_HOST", "127.0.0.1")
    monkeypatch.setenv("FLASHBOX_API_KEYS", "k1,k2")
    monkeypatch.setenv("FLASHBOX_LIMITS__MAX_TOOLS", "9")
    settings = Settings()
    assert settings.engines == ["http://x:1", "http://y:2"]
    assert (settings.port, settings.host) == (8181, "127.0.0.1")
    assert settings.api_keys == ["k1", "k2"]
    assert settings.limits.max_tools == 9


def test_bad_engine_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHBOX_ENGINES", "engine:30000")
    with pytest.raises(ValidationError, match="http://"):
        Settings()


def test_missing_config_file_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLASHBOX_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(FileNotFoundError):
        Settings()
