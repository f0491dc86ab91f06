"""Types and examples of the public API: every public function and class (tests/public_api.py: the
package's exports and what docs/api/ documents) has annotations on all its parameters and its return,
and a docstring with an `Example:` section (tests/test_docs.py runs them); mypy runs on the package
(setup.cfg [mypy]) and finds nothing."""

import ast
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from public_api import example_section, public_api, public_methods


def missing_annotations(function, is_method=False):
    """The parameters of a function node without an annotation (`self`/`cls` of a method excepted),
    plus "return" when the return has none."""
    args = function.args
    params = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
    static = any(getattr(d, "id", None) == "staticmethod" for d in function.decorator_list)
    if is_method and not static and params and params[0].arg in ("self", "cls"):
        params = params[1:]
    missing = [p.arg for p in params if p.annotation is None]
    return missing + (["return"] if function.returns is None else [])


def unannotated(node):
    """["name: param, ..."] for a function, or for a class its `__init__` and public methods."""
    if isinstance(node, ast.FunctionDef):
        missing = missing_annotations(node)
        return [f"{node.name}: {', '.join(missing)}"] if missing else []
    found = []
    for method in public_methods(node):
        missing = missing_annotations(method, is_method=True)
        if missing:
            found.append(f"{node.name}.{method.name}: {', '.join(missing)}")
    return found


def test_the_public_api_is_read_from_the_exports_and_the_reference():
    names = {(module, name) for module, name, _ in public_api()}
    assert ("keras_vit.factory", "ViTB16") in names and ("keras_vit.serving", "Classifier") in names
    assert ("keras_vit.serving", "load_classifier") in names  # exported from keras_vit.export, defined here
    assert ("keras_vit.analysis", "rollout") in names  # docs/api/visualize.md documents the whole module
    assert not any(name.startswith("_") for _, name in names)
    assert len(names) >= 60


def test_the_annotation_check_finds_what_is_missing():
    tree = ast.parse("def f(a: int, b, *args, c: str = '', **kw) -> int: ...\n"
                     "class K:\n"
                     "    def __init__(self, x: int) -> None: ...\n"
                     "    def run(self, y): ...\n"
                     "    def _private(self, z): ...\n"
                     "    @staticmethod\n"
                     "    def make(self) -> 'K': ...\n")
    function, klass = tree.body
    assert unannotated(function) == ["f: b, args, kw"]
    assert unannotated(klass) == ["K.run: y, return", "K.make: self"]


def test_every_public_function_and_class_is_annotated():
    missing = [f"{module}.{line}" for module, _, node in public_api() for line in unannotated(node)]
    assert not missing, "public signatures without annotations (parameters: the names; return: 'return'):\n" + (
        "\n".join(missing))


def test_every_public_function_and_class_has_an_example():
    missing = [f"{module}.{name}" for module, name, node in public_api()
               if example_section(ast.get_docstring(node)) is None]
    assert not missing, "public names whose docstring has no `Example:` section:\n" + "\n".join(missing)


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
    assert result.returncode == 1 and "_planted.py:2: error: Incompatible return value type" in result.stdout, (
        result.stdout + result.stderr)
