"""The README and the guides in docs/, checked as a reader uses them: every code block runs or says why
not, the README stays a two-minute read whose links hold, and the docs site builds in strict mode.

Convention (also in docs/contributing.md): the line before a block's opening fence may be
  <!-- not run: REASON -->   the block is not run: it needs a download, data of the reader's own, other
                             machines, or trains for long (REASON says which, and what to substitute);
  <!-- slow: REASON -->      the block runs in the full suite only (`pytest -m "not slow"` skips it).
Every other ```python block runs with this Python, and every ```bash block (and any block without a
language) with bash, `set -e`, this environment's `keras-vit` and `python` first on the PATH. Each runs in
a fresh process, from a scratch folder in which `saved_models/`, `tests/`, `recipes/` and `benchmarks/` are
the repository's, so the relative paths hold and whatever a block writes lands in the scratch folder.
```text blocks show output or a tree, and are not commands.

The public API's docstrings follow the same convention: each `Example:` section runs as a doctest (its
shown output is compared), in the same kind of scratch folder; a marker as the section's first line
skips it (`not run`) or leaves it to the full suite (`slow`).
"""

import ast
import doctest
import importlib
import io
import os
import re
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from public_api import example_section, public_api, public_methods

README = ROOT / "README.md"
DOCS = ROOT / "docs"
MARKER = re.compile(r"^<!--\s*(not run|slow)\s*:\s*(\S.*?)\s*-->$")
FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
RUNNERS = {"python": "python", "bash": "bash", "shell": "bash", "sh": "bash", "": "bash"}
NOT_COMMANDS = ("text",)
LINKED = ("saved_models", "tests", "recipes", "benchmarks")
README_MAX_LINES = 200


def documents():
    """The README, then every page of docs/ (the API reference pages hold no code blocks, but are read too)."""
    return [README] + sorted(p for p in DOCS.rglob("*.md") if "tooling" not in p.parts)


def code_blocks(text, name="README.md"):
    """[(line of the opening fence, language, marker or None, reason, code)] for each fenced block.

    A block's lines lose the fence's own indentation (a block inside a list item). An HTML comment on
    the line before a fence must be one of the two markers, so that a misspelt one is no silent skip.
    """
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, language, start, code = fence.group(1), fence.group(2).lower(), i + 1, []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            code.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        if i == len(lines):
            raise ValueError(f"{name}:{start}: the block opened here is never closed")
        previous = lines[start - 2].strip() if start >= 2 else ""
        match = MARKER.match(previous)
        if previous.startswith("<!--") and not match:
            raise ValueError(f"{name}:{start - 1}: {previous!r} is not '<!-- not run: reason -->' "
                             "or '<!-- slow: reason -->'")
        blocks.append((start, language, match.group(1) if match else None, match.group(2) if match else "",
                       "\n".join(code) + "\n"))
        i += 1
    return blocks


def _name(path):
    return path.relative_to(ROOT).as_posix()


def _params():
    params = []
    for path in documents():
        for line, language, marker, reason, code in code_blocks(path.read_text(), _name(path)):
            if language in NOT_COMMANDS:
                continue
            marks = []
            if marker == "not run":
                marks.append(pytest.mark.skip(reason=f"{_name(path)}:{line}: not run: {reason}"))
            elif marker == "slow":
                marks.append(pytest.mark.slow)
            params.append(pytest.param(language, code, id=f"{_name(path)}:{line}", marks=marks))
    return params


@pytest.mark.parametrize("language,code", _params())
def test_docs_block_runs(language, code, tmp_path):
    for name in LINKED:
        os.symlink(ROOT / name, tmp_path / name)
    bin_dir = os.path.dirname(sys.executable)  # this environment's python and keras-vit come first
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3",
               PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    if RUNNERS[language] == "python":
        command = [sys.executable, "-c", code]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", code]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, (f"this block failed (exit {result.returncode}):\n{code}\n"
                                    f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}")


def _example_params():
    params = []
    for module, name, node in public_api():
        documented = [(name, node)] + [(f"{name}.{f.name}", f) for f in public_methods(node)
                                       if isinstance(node, ast.ClassDef)]
        for qualname, owner in documented:
            section = example_section(ast.get_docstring(owner))
            if section is None:
                continue
            line, text = section
            first = next((s.strip() for s in text.splitlines() if s.strip()), "")
            match = MARKER.match(first)
            marks = []
            if match and match.group(1) == "not run":
                marks.append(pytest.mark.skip(reason=f"{module}.{qualname}: not run: {match.group(2)}"))
            elif match:
                marks.append(pytest.mark.slow)
            params.append(pytest.param(module, qualname, text, id=f"{module}.{qualname}", marks=marks))
    return params


@pytest.mark.parametrize("module,qualname,example", _example_params())
def test_docstring_example_runs(module, qualname, example, tmp_path, monkeypatch):
    """A public docstring's Example section, as a doctest in the module's namespace (as `python -m doctest`
    would run it), plus `np`, `keras` and `keras_vit`; run from a scratch folder like the docs' blocks."""
    import keras
    import numpy as np

    import keras_vit

    for name in LINKED:
        os.symlink(ROOT / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    globs = dict(vars(importlib.import_module(module)), np=np, keras=keras, keras_vit=keras_vit)
    test = doctest.DocTestParser().get_doctest(example, globs, f"{module}.{qualname}", module, 0)
    assert test.examples, f"{module}.{qualname}: its Example section holds no `>>>` line"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = io.StringIO()
    result = runner.run(test, out=report.write)
    assert result.failed == 0, f"{module}.{qualname}: its docstring example failed:\n{report.getvalue()}"


def test_each_code_block_is_run_or_marked_with_its_reason():
    counted = 0
    for path in documents():
        text = path.read_text()
        blocks = code_blocks(text, _name(path))
        fences = sum(1 for line in text.splitlines() if FENCE.match(line))
        assert fences == 2 * len(blocks), f"{_name(path)}: {fences} fence lines for {len(blocks)} blocks"
        for line, language, marker, reason, code in blocks:
            where = f"{_name(path)}:{line}"
            assert language in RUNNERS or language in NOT_COMMANDS, (
                f"{where}: ```{language} is neither a command ({', '.join(RUNNERS)}) nor {NOT_COMMANDS}")
            if language in NOT_COMMANDS:
                assert marker is None, f"{where}: a ```text block is never run; its marker says nothing"
                continue
            counted += 1
            # a block not run because a test runs the same command names a test that exists
            for test_file, test_name in re.findall(r"(tests/\w+\.py)::(\w+)", reason):
                assert f"def {test_name}(" in (ROOT / test_file).read_text(), f"{where}: no {test_file}::{test_name}"
            # installing is the reader's step, never the suite's: such a block says so
            if re.search(r"^\s*pip install", code, re.M):
                assert marker == "not run", f"{where}: a block that installs packages must be marked not run"
    assert counted >= 20


def test_the_markers_are_read_as_documented():
    with pytest.raises(ValueError, match=r"README.md:1: .<!-- skip -->. is not"):
        code_blocks("<!-- skip -->\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match=r"x.md:1: the block opened here is never closed"):
        code_blocks("```bash\nls\n", "x.md")
    assert code_blocks("<!-- not run: needs the network -->\n```python\nx = 1\n```\n") == (
        [(2, "python", "not run", "needs the network", "x = 1\n")])
    assert code_blocks("- a list item:\n  ```bash\n  keras-vit --help \\\n      --version\n  ```\n") == (
        [(2, "bash", None, "", "keras-vit --help \\\n    --version\n")])


def test_the_api_reference_covers_every_public_name():
    import keras_vit

    documented = set()
    for page in (DOCS / "api").glob("*.md"):
        documented |= set(re.findall(r"^::: keras_vit\.(\w+)$", page.read_text(), re.M))
    missing = sorted(set(keras_vit.__all__) - {"__version__"} - documented)
    assert not missing, f"public names with no entry in docs/api/*.md: {missing}"


def test_readme_is_a_two_minute_read_whose_first_block_is_the_two_set_up_lines():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES, f"README.md has {len(text.splitlines())} lines"
    line, language, marker, reason, code = code_blocks(text)[0]
    # .ci/run parses this block and runs both lines, each in a fresh clone and a new virtual environment
    assert code.splitlines() == [
        'pip install -e ".[digits]" && keras-vit train digits',
        'pip install -e ".[test]" && python -m pytest -n 2 -m "not slow" && KERAS_BACKEND=jax python -m pytest '
        '-n 2 -m "not slow" && KERAS_BACKEND=torch python -m pytest -n 2 -m "not slow"',
    ]
    assert marker == "not run" and ".ci/run" in reason


def test_readme_links_point_at_files_that_exist():
    text = README.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'<img [^>]*src="([^"]+)"', text)
    local = [link.split("#")[0] for link in links if not re.match(r"^[a-z]+:", link) and not link.startswith("#")]
    assert local, "the README links to the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
    assert any(link.startswith("docs/") for link in local)


def test_docs_build_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs tools are not installed: pip install -e '.[docs]'")
    pytest.importorskip("mkdocstrings", reason="the docs tools are not installed: pip install -e '.[docs]'")
    start = time.time()
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-6000:]}"
    site = tmp_path / "site"
    # the reference was generated from the docstrings, under the public names
    reference = (site / "api" / "models" / "index.html").read_text()
    assert "keras_vit.ViTB16" in reference and "keras_vit.VisionTransformer" in reference
    assert "the Transformer&#39;s width" in reference or "the Transformer's width" in reference
    assert (site / "search" / "search_index.json").exists()
    print(f"docs built in {time.time() - start:.1f} s")
