"""The admin token reader: what a token file or variable may hold, said with the file's name."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpuwatch.admintoken import ENV_VAR, read_token


def test_a_padded_env_token_is_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: "  tok \\n" in the variable could never authenticate."""
    monkeypatch.setenv(ENV_VAR, "  tok-1 \n")
    assert read_token(None) == "tok-1"


def test_a_blank_env_token_is_no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "   ")
    assert read_token(None) is None


def test_an_unsendable_env_token_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "to ken")
    with pytest.raises(ValueError, match=rf"\${ENV_VAR}: the token contains a space"):
        read_token(None)


def test_a_token_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    """Regression: the error did not say which file."""
    path = tmp_path / "token"
    path.write_bytes(b"\xff\xfetok")
    path.chmod(0o600)
    with pytest.raises(ValueError, match=rf"admin token file {path} is not UTF-8"):
        read_token(path)


def test_a_token_file_with_a_control_character_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("tok\x07en\n")
    path.chmod(0o600)
    with pytest.raises(ValueError, match=r"contains U\+0007"):
        read_token(path)


def test_a_token_file_others_can_read_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: a group/world-readable token file started silently."""
    path = tmp_path / "token"
    path.write_text("tok\n")
    path.chmod(0o644)
    assert read_token(path) == "tok"
    assert any("readable by others (mode 644): chmod 600" in r.getMessage()
               and r.levelno == logging.WARNING for r in caplog.records)  # fmt: skip
    caplog.clear()
    path.chmod(0o600)
    assert read_token(path) == "tok"
    assert caplog.records == []
