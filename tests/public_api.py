"""The public API as the docs present it, read from the source (nothing imported): the names of
keras_vit/__init__.py's `_EXPORTS` table, and the names the API reference (docs/api/*.md) documents
from public modules (`::: keras_vit.serving.Classifier`, or a whole module: `::: keras_vit.visualize`).

tests/test_typing.py checks their signatures and docstrings; tests/test_docs.py runs their examples.
"""

import ast
import functools
import re

from conftest import ROOT

PACKAGE = ROOT / "keras_vit"
API_PAGES = ROOT / "docs" / "api"
# A docstring's example section: "Example:" (the house style), "Examples:" or "Example (where it holds):".
EXAMPLE_HEADER = re.compile(r"^(Example|Examples)( \(.*\))?:\s*$")
NEXT_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")


@functools.lru_cache(maxsize=None)
def _module_tree(module):
    path = PACKAGE / (module.split(".", 1)[1].replace(".", "/") + ".py")
    if not path.exists():  # a package: keras_vit.training is keras_vit/training/__init__.py
        path = path.with_suffix("") / "__init__.py"
    return ast.parse(path.read_text(), filename=str(path))


def exported_names():
    """{public name: defining module} from `_EXPORTS` in keras_vit/__init__.py."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets):
            table = ast.literal_eval(node.value)
            return {name: module for module, names in table.items() for name in names}
    raise AssertionError("keras_vit/__init__.py has no _EXPORTS table")


def public_api():
    """[(defining module, name, ast node)] for every public function and class (constants have no signature)."""
    wanted = {(module, name) for name, module in exported_names().items()}
    for page in sorted(API_PAGES.glob("*.md")):
        for ref in re.findall(r"^::: keras_vit\.([\w.]+)$", page.read_text(), re.M):
            head, _, tail = ref.rpartition(".")
            if (PACKAGE / f"{ref.replace('.', '/')}.py").exists():  # a whole module: its public members
                for node in _module_tree(f"keras_vit.{ref}").body:
                    if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                        wanted.add((f"keras_vit.{ref}", node.name))
            elif head:
                wanted.add((f"keras_vit.{head}", tail))
    found = {}
    for module, name in wanted:
        defined = definition(module, name)
        if defined is not None:  # keyed by where it is defined: a re-export is the same object
            found[(defined[0], name)] = defined[1]
    return [(module, name, node) for (module, name), node in sorted(found.items())]


def definition(module, name):
    """(defining module, function or class node) of `name` as `module` has it, following
    `from keras_vit.x import name` re-exports; None for a constant."""
    for node in _module_tree(module).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return module, node
        if (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keras_vit") and
                any(alias.name == name and alias.asname is None for alias in node.names)):
            return definition(node.module, name)
    return None


def public_methods(node):
    """A class's `__init__` and public methods (properties included), as function nodes."""
    return [f for f in node.body if isinstance(f, ast.FunctionDef)
            and (f.name == "__init__" or not f.name.startswith("_"))]


def example_section(docstring):
    """(first line of the section within the docstring, its text) of a docstring's Example section, or None."""
    lines = (docstring or "").splitlines()
    for i, line in enumerate(lines):
        if EXAMPLE_HEADER.match(line.strip()) and not line.startswith(" "):
            body = []
            for following in lines[i + 1:]:
                if NEXT_SECTION.match(following):
                    break
                body.append(following)
            return i + 1, "\n".join(body)
    return None
