"""The layers of docs/architecture.md hold: `lint-imports` (import-linter) checks the contracts in
pyproject.toml on the source under test, and fails when a module imports a layer above its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import sparkcdc

SOURCE = Path(sparkcdc.__file__).resolve().parent.parent  # the src/ directory under test
PROJECT = SOURCE.parent


def lint_imports(project: Path, source: Path) -> subprocess.CompletedProcess:
    command = [os.path.join(os.path.dirname(sys.executable), "lint-imports"), "--no-cache", "--no-logo"]
    return subprocess.run(command, cwd=project, env={**os.environ, "PYTHONPATH": str(source)},
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_are_kept():
    result = lint_imports(PROJECT, SOURCE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" in result.stdout and " 0 broken" in result.stdout


def test_an_upward_import_breaks_them(tmp_path):
    # A codec that reaches into a sink, and config into the redo log: the two kinds of upward
    # import issue 22 removed.
    shutil.copy(PROJECT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(SOURCE / "sparkcdc", tmp_path / "src" / "sparkcdc", ignore=shutil.ignore_patterns("__pycache__"))
    codec = tmp_path / "src" / "sparkcdc" / "sink" / "codec" / "csv.py"
    codec.write_text(codec.read_text() + "\n\ndef _upward():\n    from sparkcdc.sink.storage import writer  # noqa: F401\n")
    config = tmp_path / "src" / "sparkcdc" / "config" / "replica.py"
    config.write_text(config.read_text() + "\n\ndef _upward():\n    from sparkcdc.redo import storage  # noqa: F401\n")
    result = lint_imports(tmp_path, tmp_path / "src")
    assert result.returncode != 0
    assert "codecs never import sinks BROKEN" in result.stdout
    assert "sparkcdc.sink.codec.csv -> sparkcdc.sink.storage.writer" in result.stdout
    assert "sparkcdc.config is not allowed to import sparkcdc.redo" in result.stdout
