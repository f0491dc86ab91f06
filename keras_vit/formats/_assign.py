"""The one loading pass every checkpoint format uses: plan, then assign.

A format gives a `KeyTable` (its names: source key and packed part of each keras-vit variable, the
shape the source stores, the conversion to keras-vit's layout, which leftover keys to drop) and a
source of arrays (`ArraySource`: shapes known up front, values read on demand). `load_into` maps
every variable of the model and checks every key and shape before it assigns anything: a missing
key, an unexpected key or a wrong shape raises one ValueError naming the file, the keys and the
shapes, and the model is left unchanged. Heads of another class count are kept (the model's own),
position embeddings of another grid are resampled, as the official fine-tuning does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from keras_vit._common import describe_misfit
from keras_vit.posemb import resample_note, resample_position_embeddings, stored_grid

if TYPE_CHECKING:
    import keras

log = logging.getLogger(__name__)

POSEMB_PATH = "patch_encoder/pos_embedding"
HEAD_PATHS = ("head/", "head_dist/")
# A load report's lists as its log line words them: "kept" are the model's own variables (its head),
# which nothing from the checkpoint was loaded into.
# One planned assignment: (variable, source key, packed part, how): how is None (as stored), the old grid
# of position embeddings to resample, or "zero" (key None: a bias the source has none of).
Step = tuple[Any, Any, Any, Any]
_CHANGE_LABELS = {"kept": "not loaded (the model keeps its own)", "dropped": "dropped", "resampled": "resampled"}


def describe_changes(report: dict[str, Any]) -> str:
    """A load report's changes for its log line, only those that happened ("kept: nothing" read
    as if nothing had loaded): "not loaded (the model keeps its own): head/kernel (...); resampled: ..."."""
    return "; ".join(f"{label}: {', '.join(report[key])}" for key, label in _CHANGE_LABELS.items() if report[key])


def check_channels(model: keras.Model, channels: int, source: str) -> None:
    """Refuses weights for `channels`-channel images in a model that takes another count.

    The patch projection (a hybrid's root convolution) has one kernel slice per input
    channel, so RGB weights have no place in a grayscale, RGBA or multispectral model.
    """
    own = model.input_shape[-1]
    if channels != own:
        raise ValueError(
            f"{source} holds weights for {channels}-channel images{' (RGB)' if channels == 3 else ''}, but the "
            f"model {model.name!r} takes {own} channel(s): build it with input_shape=(height, width, {channels}) "
            "to load them, or train it from scratch with weights=None."
        )


class ArraySource:
    """A checkpoint's arrays: `shapes` ({key: shape}) known before any is read, `read(key)` one array,
    `verify()` run once after the plan and before the first assignment (an .npz checks its CRCs there)."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], read: Callable[[str], np.ndarray],
                 verify: Callable[[], None] | None = None):
        self.shapes = shapes
        self.read = read
        self.verify = verify or (lambda: None)

    @classmethod
    def of(cls, tensors: dict[str, Any]) -> ArraySource:
        """The source of arrays already in memory ({key: array})."""
        return cls({k: tuple(v.shape) for k, v in tensors.items()}, lambda key: np.asarray(tensors[key]))


class KeyTable:
    """A format's names and layouts; the defaults are the identity. Subclasses set `format` (the
    label of the log line) and override `key`, and whatever else differs."""

    format = "checkpoint"

    def new_report(self) -> dict[str, Any]:
        return {"loaded": [], "kept": [], "dropped": [], "resampled": []}

    def key(self, path: str) -> tuple[str | None, tuple[int, int] | None]:
        """(source key, packed part (index, count) or None) of a keras-vit variable path; (None, None)
        when the source has no place for it."""
        raise NotImplementedError

    def shape(self, variable: Any, key: str, part: tuple[int, int] | None) -> tuple[int, ...]:
        """The shape the source stores for `variable` under `key`."""
        return tuple(variable.shape)

    def fits(self, variable: Any, key: str, want: tuple[int, ...], found: tuple[int, ...]) -> bool:
        return found == want

    def posemb_fits(self, shapes: dict[str, tuple[int, ...]]) -> bool:
        """Whether the source's position embeddings can be resampled for this model at all."""
        return True

    def absent(self, variable: Any, key: str, shapes: dict[str, tuple[int, ...]], model: keras.Model) -> bool:
        """True when a variable missing from the source is set to zero (a bias the source has none of)."""
        return False

    def drops(self, key: str, model: keras.Model) -> bool:
        """Whether a source key the model has no variable for is dropped rather than refused."""
        return False

    def unexpected_hint(self, unexpected: list[str]) -> str:
        return ""

    def to_keras(self, value: np.ndarray, variable: Any, part: tuple[int, int] | None) -> np.ndarray:
        """A source array in the variable's layout (after any resampling of position embeddings)."""
        return value


def plan(model: keras.Model, table: KeyTable, shapes: dict[str, tuple[int, ...]], *, source: str,
         resample: str) -> tuple[list[Step], dict[str, Any]]:
    """Every variable's step ((variable, key, part, how): how is None, an old grid to resample from, or
    "zero") and the report, or a ValueError naming `source`, keys and shapes; nothing is assigned."""
    report = table.new_report()
    steps: list[Step] = []
    missing, mismatched, expected = [], [], set()
    for variable in model.weights:
        key, part = table.key(variable.path)
        if key is None:
            missing.append(f"{variable.path} (no {table.format} equivalent)")
            continue
        expected.add(key)
        want = table.shape(variable, key, part)
        is_head = variable.path.startswith(HEAD_PATHS)
        if key not in shapes:
            if table.absent(variable, key, shapes, model):
                steps.append((variable, None, None, "zero"))
                report["zeroed"].append(variable.path)
            elif is_head:
                report["kept"].append(f"{key} (not in the checkpoint)")
            else:
                missing.append(f"{key} {want}")
            continue
        found = shapes[key]
        if table.fits(variable, key, want, found):
            steps.append((variable, key, part, None))
        elif is_head:
            report["kept"].append(f"{key} (model {want}, checkpoint {found})")
        elif variable.path == POSEMB_PATH and len(found) == 3 and found[2] == want[2] and table.posemb_fits(shapes):
            try:
                old_grid = stored_grid(model, found[1])
            except ValueError as e:
                mismatched.append(f"{key}: expected {want}, found {found} ({e})")
                continue
            steps.append((variable, key, part, old_grid))
            report["resampled"].append(resample_note(old_grid, model.patch_encoder.grid_size, resample))
        else:
            mismatched.append(f"{key}: expected {want}, found {found}")
    unexpected = []
    for key in sorted(set(shapes) - expected):
        if table.drops(key, model):
            report["dropped"].append(key)
        else:
            unexpected.append(f"{key} {shapes[key]}")
    if missing or unexpected or mismatched:
        raise ValueError(f"{source} does not fit the model {model.name!r}: "
                         + describe_misfit(missing, unexpected, mismatched, table.unexpected_hint(unexpected))
                         + ". The model was left unchanged.")
    return steps, report


def load_into(model: keras.Model, table: KeyTable, arrays: ArraySource, *, source: str, name: str,
              resample: str) -> dict[str, Any]:
    """The pass: `plan` (every key and shape checked, the model unchanged on error), then
    `arrays.verify()`, then one assignment per variable, each array read once. `source` begins the
    error message ("Checkpoint x.npz (released key layout)"); `name` is the file the log line names."""
    steps, report = plan(model, table, arrays.shapes, source=source, resample=resample)
    arrays.verify()
    loaded = set()
    for variable, key, part, how in steps:
        if how == "zero":
            variable.assign(np.zeros(variable.shape, variable.dtype))
            continue
        value = arrays.read(key)
        if how is not None:
            value = resample_position_embeddings(value, model.patch_encoder.grid_size, old_grid=how,
                                                 num_prefix_tokens=model.num_posemb_prefix_tokens, method=resample)
        variable.assign(table.to_keras(value, variable, part).astype(variable.dtype))
        del value  # one array in memory at a time
        if key not in loaded:
            loaded.add(key)
            report["loaded"].append(key)
    pieces = [p for p in (describe_changes(report),) if p]
    if report.get("zeroed"):
        pieces.append(f"biases the source has none of set to zero: {len(report['zeroed'])}")
    log.info("loaded %d arrays from %s (%s)%s.", len(report["loaded"]), name, table.format,
             "; " + "; ".join(pieces) if pieces else ", every variable of the model")
    return report
