"""mkdocs hooks (mkdocs.yml `hooks:`): links from the docs to the repository's other files.

The guides link to files outside docs/ (benchmarks/RESULTS.md, the model cards, a benchmark's figure)
with relative links (`../benchmarks/RESULTS.md`), which work where the Markdown is read in the
repository. For the site, each such file is copied in under `repo/` as it is (Markdown included: the
site shows it as text, not as a page) and the link pointed at the copy; a link to a file that does not
exist is a warning, which `mkdocs build --strict` turns into a failure.
"""

import logging
import os
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.plugins.keras_vit")
LINK = re.compile(r"(\]\(|<img [^>]*src=\")([^)\"\s#]+)")
MIRROR = "repo"


class RepoFile(File):
    """A repository file copied into the site as it is, never rendered as a page."""

    def is_documentation_page(self):
        return False


def _outside_targets(page_path, text, docs_dir, root):
    """(link, repository path) for each relative link of a page that leaves docs/ but stays in the repository."""
    for match in LINK.finditer(text):
        link = match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", link) or link.startswith("/"):
            continue
        target = Path(os.path.normpath(page_path.parent / link))
        if docs_dir in target.parents or target == docs_dir:
            continue
        if root not in target.parents:
            log.warning(f"{page_path.relative_to(root)}: the link {link!r} leaves the repository")
            continue
        yield link, target.relative_to(root).as_posix()


def on_files(files, config):
    docs_dir, root = Path(config.docs_dir).resolve(), Path(config.config_file_path).resolve().parent
    added = set()
    for file in list(files.documentation_pages()):
        page_path = Path(file.abs_src_path)
        for link, target in _outside_targets(page_path, page_path.read_text(), docs_dir, root):
            if not (root / target).is_file():
                log.warning(f"Doc file '{file.src_uri}' links to '{link}', which is no file of the repository")
            elif target not in added:
                added.add(target)
                files.append(RepoFile.generated(config, f"{MIRROR}/{target}", abs_src_path=str(root / target)))
    return files


def on_page_markdown(markdown, page, config, files):
    docs_dir, root = Path(config.docs_dir).resolve(), Path(config.config_file_path).resolve().parent
    page_path = Path(page.file.abs_src_path)
    for link, target in set(_outside_targets(page_path, markdown, docs_dir, root)):
        if (root / target).is_file():
            copy = posixpath.relpath(f"{MIRROR}/{target}", posixpath.dirname(page.file.src_uri) or ".")
            markdown = markdown.replace(f"]({link}", f"]({copy}").replace(f'src="{link}"', f'src="{copy}"')
    return markdown
