"""One error base, caught once: every exception gpuwatch raises on purpose is a
``GpuwatchError`` carrying its exit code, and ``cli/main.py`` turns one that reaches it into a
single line naming the command, never a traceback. A hostile ``--config`` (invalid TOML, nesting
deep enough to exhaust the parser's recursion, a number past int()'s digit limit, wrong types)
is one of them: one line, exit 2, for every command that reads the file."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import gpuwatch
from gpuwatch.cli.main import main
from gpuwatch.errors import EXIT_FAILED, EXIT_USAGE, ConfigError, GpuwatchError
from gpuwatch.tui.themes import BUILTIN_DIR, load_themes


def package_exceptions() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(gpuwatch.__path__, "gpuwatch."):
        if info.name == "gpuwatch.__main__":  # runs the command line on import
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == info.name:
                found.append(obj)
    return found


def test_every_exception_in_the_package_is_a_gpuwatch_error() -> None:
    classes = package_exceptions()
    assert len(classes) > 30  # the walk found the package's errors
    strays = [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, GpuwatchError)
    ]
    assert not strays


def test_a_class_says_its_exit_code_where_it_is_declared() -> None:
    from gpuwatch.cli.plan_kv import GpuReadError
    from gpuwatch.load.spec import SpecError
    from gpuwatch.plan.kv import PlanError
    from gpuwatch.sources.scrape import ScrapeError

    assert (ScrapeError.exit_code, ConfigError.exit_code) == (EXIT_FAILED, EXIT_USAGE)
    assert (PlanError.exit_code, GpuReadError.exit_code) == (EXIT_USAGE, EXIT_FAILED)
    # Those that were ValueError still are: every `except ValueError` around them still holds.
    assert issubclass(SpecError, ValueError) and SpecError.exit_code == EXIT_USAGE


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    return err.strip()


def test_main_prints_a_commands_error_once_with_its_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # RecordingError (exit 2) from `replay`, no longer caught by the command itself.
    assert main(["replay", str(tmp_path / "none.sqlite")]) == EXIT_USAGE
    assert one_line(capsys).startswith("gpuwatch replay: ")
    # SpecError (exit 2) from `load`.
    load = ["load", "--url", "http://127.0.0.1:9", "--rate", "1", "--requests", "1"]
    assert main([*load, "--pattern", "zigzag"]) == EXIT_USAGE
    assert one_line(capsys).startswith("gpuwatch load: ")
    # GpuReadError (exit 1: a source failed) from `plan kv`, with the verb in the name.
    dead = "http://127.0.0.1:9"
    code = main(["plan", "kv", "--profile", "tiny", "--gpu", "0", "--fake-gpu-from", dead])
    assert code == EXIT_FAILED
    assert one_line(capsys).startswith("gpuwatch plan kv: --gpu 0: ")


HOSTILE = {
    "invalid TOML": b"metrics = [\n",
    "nested too deep": b"metrics = " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "inline tables too deep": b"slo = " + b"{a = " * 5000 + b"1" + b"}" * 5000 + b"\n",
    "an int past 4300 digits": b"interval_s = " + b"1" * 5000 + b"\n",
    "not UTF-8": b"theme = '\xff\xfe'\n",
    "a string for a number": b'interval_s = "fast"\n',
    "a number for a table": b"slo = 3\n",
    "a list of numbers for URLs": b"metrics = [1, 2]\n",
    "a table of numbers for gates": b"[gates]\nx = 1\n",
    "infinity": b"[slo]\nttft_p99_s = inf\n",
    "an unknown key": b"[scrape]\ntimeout = 3\n",
}
COMMANDS = {
    "top": ["--no-gpu"],
    "snapshot": ["snapshot", "--no-gpu"],
    "watch": ["watch", "--no-gpu", "--count", "1"],
    "record": ["record", "--no-gpu", "--out", "rec.sqlite"],
    "demo": ["demo"],
    "plan sweep": ["plan", "sweep"],
}


@pytest.mark.parametrize("content", HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_hostile_config_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    content: bytes,
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "config.toml"
    cfg.write_bytes(content)
    assert main([*command, "--config", str(cfg)]) == EXIT_USAGE
    line = one_line(capsys)
    assert f"config error: {cfg}: " in line
    assert not (tmp_path / "rec.sqlite").exists()  # nothing was done


@pytest.mark.parametrize("content", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_gate_config_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes
) -> None:
    cfg = tmp_path / "gate.toml"
    cfg.write_bytes(content)
    args = ["gate", "--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:0"]
    assert main([*args, "--config", str(cfg)]) == EXIT_USAGE
    assert f"{cfg}: " in one_line(capsys)


def test_a_hostile_theme_is_skipped_with_one_line(tmp_path: Path) -> None:
    for name, content in HOSTILE.items():
        (tmp_path / f"{name.replace(' ', '-')}.toml").write_bytes(content)
    good = BUILTIN_DIR / "gpuwatch-light.toml"
    (tmp_path / good.name).write_bytes(good.read_bytes())
    themes, warnings = load_themes([tmp_path])
    assert [theme.name for theme in themes] == ["gpuwatch-light"]
    assert len(warnings) == len(HOSTILE)
    assert all(w.startswith("skipped theme ") and "\n" not in w for w in warnings)
