"""A griffe extension that reads keras-vit as its users see it, for the API reference (mkdocs.yml).

Two of the package's conventions, which griffe's static reading would otherwise miss:

- Public names are handed out on first use (PEP 562): `keras_vit/__init__.py` imports nothing heavy,
  and its `_EXPORTS` table (module -> names) is what `__getattr__` reads. Each name becomes a member of
  `keras_vit`, an alias of the object in its module, read from that same table: the reference names the
  public path (`keras_vit.ViTB16`) and follows a module move without a change here.
- A docstring's `Example:` section holds doctest lines at the docstring's own indentation (the section
  is the docstring's last). They are indented under the header here, as Google style reads a section,
  so they render as an example (code) rather than as Markdown quotes.
"""

import ast
import pathlib
import re

import griffe

SECTION = re.compile(r"^(Example|Examples):\s*$")
NEXT_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")


def public_exports(init_path):
    """{public name: defining module} from the `_EXPORTS` table in keras_vit/__init__.py (read, not run)."""
    tree = ast.parse(pathlib.Path(init_path).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets):
            table = ast.literal_eval(node.value)
            return {name: module for module, names in table.items() for name in names}
    raise ValueError(f"{init_path}: no _EXPORTS table; the docs' API reference reads the public names from it")


def indent_examples(text):
    """The lines after an unindented `Example:` header, indented under an `Examples:` one (up to the next header)."""
    lines, out, inside = text.splitlines(), [], False
    for line in lines:
        if SECTION.match(line):
            inside, line = True, "Examples:"  # griffe reads "Example:" as an admonition, "Examples:" as code
        elif inside and NEXT_SECTION.match(line):
            inside = False
        elif inside and line and not line.startswith(" "):
            line = "    " + line
        out.append(line)
    return "\n".join(out)


class KerasVitConventions(griffe.Extension):
    def on_object(self, *, obj, **kwargs):
        if obj.docstring is not None and obj.docstring.value:
            obj.docstring.value = indent_examples(obj.docstring.value)

    def on_package(self, *, pkg, **kwargs):
        if pkg.name != "keras_vit":
            return
        for name, module in public_exports(pkg.filepath).items():
            if name not in pkg.members:
                pkg.set_member(name, griffe.Alias(name, f"{module}.{name}", parent=pkg))
