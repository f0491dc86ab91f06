"""The house rules, checked on the source: imports point one way (no cycles, counting
imports inside functions), no module reaches for another module's private names, and
ruff is clean."""

import ast
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "keras_vit"


def _modules():
    """{dotted name: file} for every module of the package and its subpackages (keras_vit/training/...)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if not all((PACKAGE.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
            continue  # not a package's module (the recipes link, resources)
        name = ".".join(("keras_vit",) + parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(module, path):
    """(imported module, [imported names], line) for every import in a file, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names = [alias.name for alias in node.names]
            found.append((base, names, node.lineno))
    return found


def _graph():
    """{module: {imported keras_vit module: line}}; `from keras_vit import data` counts as data."""
    modules = _modules()
    graph = {m: {} for m in modules}
    for module, path in modules.items():
        for base, names, line in _imports(module, path):
            targets = [base] if base in modules else []
            targets += [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
            for target in targets:
                if target != module and target != "keras_vit":
                    graph[module].setdefault(target, line)
    return graph


def find_cycle(graph):
    """One import cycle as a list of modules (first == last), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1}, "b": {}}) is None


def test_the_graph_sees_imports_inside_functions(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from keras_vit.models import VisionTransformer\n    import keras_vit.data\n")
    found = _imports("keras_vit.m", path)
    assert ("keras_vit.models", ["VisionTransformer"], 2) in found
    assert ("keras_vit.data", [], 3) in found


def test_no_import_cycles_in_the_package():
    graph = _graph()
    cycle = find_cycle(graph)
    if cycle:
        steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:])]
        pytest.fail("import cycle: " + "; ".join(steps))


# The house's floors, bottom up (docs/contributing.md, "Layout"): a module imports only from its own floor or below.
FLOORS = {
    "keras_vit._common": 0, "keras_vit._files": 0, "keras_vit._optional": 0, "keras_vit.presets": 0,
    "keras_vit.interpolation": 0, "keras_vit._recipes": 0, "keras_vit._losses": 0, "keras_vit.attention": 0,
    "keras_vit.augment": 0, "keras_vit.images": 0, "keras_vit.rope": 0,
    "keras_vit.layers": 1, "keras_vit.stem": 1, "keras_vit.config": 1,
    "keras_vit.models": 2,
    "keras_vit.posemb": 3, "keras_vit.checkpoints": 3, "keras_vit.pretrained": 3, "keras_vit.distill": 3,
    "keras_vit.masked": 3,
    # layout maps: the config's rules, a stand-in model built from it; the training loop above uses them
    "keras_vit.parallel": 3,
    # dense/: its config and layers beside the backbone's, its heads above them, the model and readers beside
    # the checkpoint readers (pretrained dispatches to them)
    "keras_vit.dense.config": 0, "keras_vit.dense.layers": 1, "keras_vit.dense.heads": 1,
    "keras_vit.dense.model": 3, "keras_vit.dense.transformers": 3, "keras_vit.dense": 3,
    # its losses beside the layers, its pictures and scenes at the bottom, its data beside keras_vit.data, its
    # training job above the training loop it runs in
    "keras_vit.dense.losses": 1, "keras_vit.dense.visualize": 0, "keras_vit.dense.scenes": 0,
    "keras_vit.dense.data": 4, "keras_vit.dense.training": 5, "keras_vit.dense.predict": 5, "keras_vit.dense.export": 5,
    # zeroshot/: the tokenizers beside the checkpoint readers (their bounded JSON reader),
    # the text tower beside the backbone, its reader beside the
    # checkpoint readers, the two-tower model above from_pretrained
    "keras_vit.zeroshot.tokenizers": 3, "keras_vit.zeroshot.text": 2, "keras_vit.zeroshot.transformers": 3,
    "keras_vit.zeroshot.model": 4, "keras_vit.zeroshot": 4, "keras_vit.zeroshot.export": 5,
    "keras_vit.zeroshot.figures": 5,
    "keras_vit.formats": 3, "keras_vit.formats._assign": 3, "keras_vit.formats._torch": 3,
    "keras_vit.formats.official": 3, "keras_vit.formats.timm": 3, "keras_vit.formats.transformers": 3,
    "keras_vit.formats._safetensors": 3, "keras_vit.formats._headers": 3, "keras_vit.formats.keras_files": 3,
    "keras_vit.applications": 4, "keras_vit.data": 4, "keras_vit.loading": 4, "keras_vit.factory": 4,
    "keras_vit.analysis": 4,
    "keras_vit.serving": 5, "keras_vit.onnx": 5, "keras_vit.export": 5,
    # training/: config, distribution, optimizers and keras_patches below the loop; the package re-exports them all
    "keras_vit.training.config": 5, "keras_vit.training.distribution": 5, "keras_vit.training.optimizers": 5,
    "keras_vit.training.keras_patches": 5, "keras_vit.training.build": 5, "keras_vit.training.callbacks": 5,
    "keras_vit.training.loop": 5, "keras_vit.training": 5,
    "keras_vit.visualize": 5, "keras_vit.fewshot": 5, "keras_vit.tflite_metadata": 5, "keras_vit.report": 5,
    "keras_vit.cli": 6,
}


def test_imports_point_one_way_up_the_floors():
    graph = _graph()
    unplaced = sorted(set(graph) - set(FLOORS) - {"keras_vit"})
    assert not unplaced, f"modules with no floor in tests/test_house.py FLOORS: {unplaced}"
    downward = [f"{module} (floor {FLOORS[module]}, line {line}) imports {target} (floor {FLOORS[target]})"
                for module, targets in graph.items() if module in FLOORS
                for target, line in targets.items() if FLOORS[target] > FLOORS[module]]
    assert not downward, "imports against the house's direction:\n" + "\n".join(downward)


def grid_computations(path):
    """["function (line N)"] where a file computes a patch grid from an image size: `image_size // ...` (not
    `image_size // grid`, the effective patch) or `grid_size(image_size, ...)`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []

    def visit(node, where):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            where = f"{where}.{node.name}" if where else node.name
        left = right = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
            left, right = ast.unparse(node.left), ast.unparse(node.right)
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "grid_size" and node.args:
            left, right = ast.unparse(node.args[0]), ""
        if left is not None and "image_size" in left and "grid" not in right:
            found.append(f"{where or '<module>'} (line {node.lineno})")
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "")
    return found


def test_the_grid_finder_finds_a_grid_computed(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def encoder(a, effective):\n"
                    "    grid = (a['image_size'][0] // effective[0], a['image_size'][1] // effective[1])\n"
                    "class M:\n    def check(self):\n        grid_size(self.image_size, self.patch_size)\n"
                    "def stride(model, grid):\n    return model.image_size[0] // grid[0]\n")
    assert grid_computations(path) == ["encoder (line 2)", "encoder (line 2)", "M.check (line 5)"]


def test_the_patch_grid_is_computed_in_one_place():
    """ViTConfig.grid is the model's patch grid; everything else (the patch encoder's position table,
    BEiT's relative position bias, the checkpoint loaders) is handed it, so a model's image size walks
    from its config down to the layers, never back up (issue 36)."""
    found = [f"{path.relative_to(ROOT)}: {where}" for path in sorted(PACKAGE.rglob("*.py"))
             for where in grid_computations(path)]
    elsewhere = [where for where in found if not where.startswith("keras_vit/config.py: ViTConfig.grid ")]
    assert found and not elsewhere, "the patch grid computed outside ViTConfig.grid:\n" + "\n".join(elsewhere)


def test_no_module_imports_another_modules_private_names():
    """keras_vit/_files.py-style private modules are fine; `_name`s of other modules are not."""
    crossings = []
    modules = _modules()
    for module, path in modules.items():
        for base, names, line in _imports(module, path):
            if not base.startswith("keras_vit"):
                continue
            for name in names:
                if name.startswith("_") and f"{base}.{name}" not in modules and name != "__version__":
                    crossings.append(f"{path.name}:{line} imports {name} from {base}")
    assert not crossings, "private names crossing modules:\n" + "\n".join(crossings)


def _backslash_continuations(source):
    """Line numbers that end in a backslash continuation (outside strings): static tools lose the
    expression there; parentheses carry a line on."""
    import io
    import tokenize

    lines = set()
    previous_end = None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if previous_end is not None and token.start[0] > previous_end[0] and token.type not in (
                tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            # a token on a later line with no NEWLINE/NL token between: the lines were joined by a backslash
            lines.add(previous_end[0])
        previous_end = token.end if token.type not in (tokenize.NL, tokenize.NEWLINE) else None
    return sorted(lines)


def test_the_backslash_finder_finds_one():
    source = "x = 1 + \\\n    2\ny = (1 +\n     2)\ns = '''a \\\nb'''\nz = 3\n"
    assert _backslash_continuations(source) == [1]


def test_no_backslash_continuations():
    paths = [*PACKAGE.rglob("*.py"), *ROOT.glob("recipes/*.py"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("tests/*.py"),
             *ROOT.glob("saved_models/*.py")]
    found = {str(path.relative_to(ROOT)): lines for path in sorted(paths)
             if (lines := _backslash_continuations(path.read_text()))}
    assert not found, f"backslash continuations (use parentheses): {found}"


def test_modules_log_under_their_own_names():
    """`getLogger(__name__)`: a user can quiet one module (keras_vit.data) and keep the rest; the package's
    root logger "keras_vit" is named only where it is configured (__init__'s NullHandler, the CLI)."""
    literal = [str(path.relative_to(ROOT)) for path in PACKAGE.rglob("*.py")
               if path.name not in ("__init__.py", "cli.py") and 'getLogger("keras_vit")' in path.read_text()]
    assert not literal, f"modules that log as 'keras_vit' instead of getLogger(__name__): {literal}"


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).with_name("ruff"))
    if not pathlib.Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install keras-vit[test])")
    result = subprocess.run([ruff, "check", "keras_vit", "tests", "recipes", "benchmarks"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_missing_optional_dependency_names_its_extra(monkeypatch):
    from keras_vit import data

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # as if not installed
    with pytest.raises(ImportError, match=r"tfds data set 'cifar10' needs the optional package tensorflow-datasets"
                                          r".*pip install \"keras-vit\[tfds\]\""):
        data.load_data("tfds:cifar10")
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match=r"digits data set needs the optional package scikit-learn.*keras-vit\[digits\]"):
        data.load_data("digits")


def test_optional_dependencies_are_extras_not_requirements():
    import configparser

    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    core = setup["options"]["install_requires"].split()
    extras = setup["options.extras_require"]
    for package, extra in (("scikit-learn", "digits"), ("tensorflow-datasets", "tfds"), ("tensorboard", "tensorboard")):
        assert package not in core and package in extras[extra].split() and package in extras["test"].split()
    assert "ruff" in extras["test"].split()


def _misspelled(name):
    """A typo of a keyword: two letters swapped inside it ("classes" -> "calsses")."""
    i = len(name) // 2
    return name[:i - 1] + name[i] + name[i - 1] + name[i + 1:]


def test_every_public_callable_refuses_a_misspelled_keyword_naming_it():
    """The house rule "misspelled keywords refused": every class and function of keras_vit.__all__ (and the
    loaders of checkpoints and pretrained) raises a TypeError naming the keyword meant, before any work."""
    import inspect

    import keras_vit
    from keras_vit import checkpoints, pretrained
    from keras_vit._common import keywords_of

    public = {name: getattr(keras_vit, name) for name in keras_vit.__all__ if callable(getattr(keras_vit, name))}
    public.update({f"checkpoints.{f.__name__}": f for f in (checkpoints.load_weights, checkpoints.load_keras_model,
                                                             checkpoints.convert_checkpoint)})
    public.update({f"pretrained.{f.__name__}": f for f in (pretrained.convert, pretrained.load_state_dict)})
    failures = []
    for name, fn in sorted(public.items()):
        target = fn.__init__ if inspect.isclass(fn) else fn
        params = [p for p in inspect.signature(target).parameters.values() if p.name != "self"]
        required = [p for p in params if p.default is p.empty and p.kind == p.POSITIONAL_OR_KEYWORD]
        keywords = sorted(keywords_of(target))
        keyword = max(keywords, key=len) if keywords else None  # the longest: the least ambiguous typo
        typo = _misspelled(keyword) if keyword else "zzz"
        try:
            fn(*[None] * len(required), **{typo: 1})
        except TypeError as e:
            if keyword and f"`{typo}` (did you mean `{keyword}`?)" not in str(e) or f"`{typo}`" not in str(e):
                failures.append(f"{name}({typo}=1): {e}")
        except Exception as e:  # noqa: BLE001  (any other error means the typo reached the work)
            failures.append(f"{name}({typo}=1) raised {type(e).__name__}: {e}")
        else:
            failures.append(f"{name}({typo}=1) ran")
    assert not failures, "\n".join(failures)


def test_contributing_names_every_module_and_every_test_file():
    """docs/contributing.md's layout names every module, its Tests paragraph every test file, and the count of
    `test_<module>.py` files it gives is the tree's (issue 36: the README's naming rule had drifted, 8 of 22)."""
    text = (ROOT / "docs" / "contributing.md").read_text()
    layout = text[text.index("```text\nkeras_vit/"):]
    layout = layout[:layout.index("\n```")]
    unnamed = [p.name for p in sorted(PACKAGE.glob("*.py")) if not re.search(rf"\b{re.escape(p.name)}", layout)]
    assert not unnamed, f"modules missing from docs/contributing.md's layout: {unnamed}"
    tests = text[text.index("Test files:"):text.index("Fixtures live under")]
    files = sorted(p.stem.removeprefix("test_") for p in (ROOT / "tests").glob("test_*.py"))
    own = [f for f in files if (PACKAGE / f"{f}.py").exists() or (PACKAGE / f / "__init__.py").exists()]  # modules, packages
    stated = re.search(r"own tests \((\d+) of the (\d+) files: (.*?)\); the", tests, re.S)
    assert stated, "docs/contributing.md: 'own tests (N of the M files: ...)' not found"
    assert (int(stated[1]), int(stated[2])) == (len(own), len(files)), (stated[1], stated[2], len(own), len(files))
    assert sorted(re.findall(r"`(\w+)`", stated[3])) == own, (stated[3], own)
    unlisted = [f"test_{f}.py" for f in files if f not in own and f"`test_{f}.py`" not in tests]
    assert not unlisted, f"test files docs/contributing.md does not say what they check: {unlisted}"
