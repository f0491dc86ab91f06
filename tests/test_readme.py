"""The README's python blocks, run as a reader would run them: the README cannot drift from the code.

Convention (also in the README's "Tests" section): the line before a block's opening fence may be
  <!-- not run: REASON -->   the block is not run (it needs the network, or data of the reader's own);
  <!-- slow: REASON -->      the block runs in the full suite only (pytest -m slow selects it).
Every other ```python block runs, each in a fresh Python process, from a scratch folder in which
`saved_models/`, `tests/` and `recipes/` are the repository's, so the README's relative paths hold
and whatever a block writes (figs/, vit.keras, exports) lands in the scratch folder.
"""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

README = ROOT / "README.md"
MARKER = re.compile(r"^<!--\s*(not run|slow)\s*:\s*(\S.*?)\s*-->$")
LINKED = ("saved_models", "tests", "recipes")


def python_blocks(text):
    """[(line number of the opening fence, marker or None, reason, code)] for each ```python block."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start, code = i + 1, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                code.append(lines[i])
                i += 1
            previous = lines[start - 2].strip() if start >= 2 else ""
            match = MARKER.match(previous)
            if previous.startswith("<!--") and not match:
                raise ValueError(f"README.md:{start - 1}: {previous!r} is not '<!-- not run: reason -->' "
                                 "or '<!-- slow: reason -->'")
            blocks.append((start, match.group(1) if match else None, match.group(2) if match else "",
                           "\n".join(code) + "\n"))
        i += 1
    return blocks


def _params():
    params = []
    for line, marker, reason, code in python_blocks(README.read_text()):
        marks = []
        if marker == "not run":
            marks.append(pytest.mark.skip(reason=f"README.md:{line}: not run: {reason}"))
        elif marker == "slow":
            marks.append(pytest.mark.slow)
        params.append(pytest.param(code, id=f"README.md:{line}", marks=marks))
    return params


@pytest.mark.parametrize("code", _params())
def test_readme_python_block_runs(code, tmp_path):
    for name in LINKED:
        os.symlink(ROOT / name, tmp_path / name)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=1200)
    assert result.returncode == 0, f"this README block failed:\n{code}\n{result.stderr[-4000:]}"


def test_markers_are_recognised_and_every_block_is_accounted_for():
    text = README.read_text()
    blocks = python_blocks(text)
    assert len(blocks) == text.count("```python") >= 4
    assert sum(marker != "not run" for _, marker, _, _ in blocks) >= 3, "most README blocks should run"
    with pytest.raises(ValueError, match=r"README.md:1: .<!-- skip -->. is not"):
        python_blocks("<!-- skip -->\n```python\nx = 1\n```\n")
    assert python_blocks("<!-- not run: needs the network -->\n```python\nx = 1\n```\n") == \
        [(2, "not run", "needs the network", "x = 1\n")]
