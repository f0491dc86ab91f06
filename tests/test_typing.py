"""Types: mypy runs on the package (setup.cfg [mypy]) and finds nothing."""

import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT


def test_mypy_finds_no_errors(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed: pip install -e '.[test]'")
    start = time.time()
    # a fresh cache: a stale one in the checkout must not hide an error (the run takes ~10 s without)
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, MYPY_FORCE_COLOR="0"))
    assert result.returncode == 0, f"mypy found errors (setup.cfg [mypy]):\n{result.stdout[-6000:]}{result.stderr[-2000:]}"
    assert "Success" in result.stdout
    print(f"mypy: {result.stdout.strip()} in {time.time() - start:.1f} s")


def test_mypy_reports_a_planted_error(tmp_path):
    """The check can fail: the same configuration, on a copy of the package with one wrong annotation."""
    pytest.importorskip("mypy", reason="mypy is not installed: pip install -e '.[test]'")
    copy = tmp_path / "keras_vit"
    shutil.copytree(ROOT / "keras_vit", copy, ignore=shutil.ignore_patterns("__pycache__", "resources", "recipes"))
    (copy / "_planted.py").write_text("def scale(x: float) -> str:\n    return x * 2.0\n")
    shutil.copy(ROOT / "setup.cfg", tmp_path / "setup.cfg")
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1 and "_planted.py:2: error: Incompatible return value type" in result.stdout, \
        result.stdout + result.stderr
