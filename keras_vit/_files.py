"""Atomic file writes: a reader never sees a half-written model, checkpoint or export."""

import contextlib
import os
import shutil
import tempfile


@contextlib.contextmanager
def atomic_path(target, *, overwrite=True, suffix=None):
    """Yields a temporary path beside `target`; renames it onto `target` on success.

    The temporary path keeps `target`'s extension (or `suffix`), since Keras picks the
    format from it. On any error the temporary file or folder is removed and `target`
    is left as it was.
    """
    target = os.path.abspath(os.fspath(target))
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(f"{target} exists; pass overwrite=True (--overwrite) to replace it.")
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    name = os.path.basename(target)
    if suffix is None:
        suffix = next((s for s in (".weights.h5", ".keras", ".tflite", ".npz", ".json") if name.endswith(s)), "")
    tmp_dir = tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=parent)
    tmp = os.path.join(tmp_dir, "partial" + suffix)
    try:
        yield tmp
        if not os.path.exists(tmp):
            raise RuntimeError(f"nothing was written for {target}")
        if os.path.isdir(tmp):
            backup = None
            if os.path.exists(target):  # os.replace cannot put a folder over a folder
                backup = tmp_dir + ".old"
                os.rename(target, backup)
            os.rename(tmp, target)
            if backup:
                shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
