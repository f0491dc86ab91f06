"""tf.data input pipelines: sources (arrays, image folders, CSV lists, .tgz archives, tfds), the
official preprocessing (pixels to [-1, 1]), augmentation and batching.

A source gives uint8 RGB images and integer labels with class names; `make_dataset`
turns a split into a batched `tf.data.Dataset` of (images in [-1, 1], one-hot labels).
Datasets sorted by class are always shuffled with a fixed seed before any slicing, so
no split or subset is biased towards the first classes.

Folders and CSV lists of photos are streamed: a Split holds their paths and what each file's
header said (keras_vit/images.py), never their pixels; `make_dataset` shuffles the paths, then
reads, decodes and crops in parallel. A folder is `FOLDER/<class>/*` (split here, seeded:
`file_splits`), `FOLDER/{train,val,test}/<class>/*`, or a CSV of `path,label[,split]` lines;
files that cannot be read are left out, each named once in a summary line (`strict` refuses).

`data_source` is the one reading of a data spec ("digits", "tfds:NAME", a folder, a CSV, an
archive) for training and export alike; `load_image_set` reads the sample and calibration
images of an export from any of those, or from files, arrays and datasets.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import socket
import tarfile
import warnings
from typing import TYPE_CHECKING, Any, Iterator, Sequence, cast

import numpy as np
import tensorflow as tf

# one definition each, shared with predict and export
from keras_vit._optional import require
from keras_vit.applications import IMAGE_EXTENSIONS, load_image, resize_images, scale_pixels, to_pixels, to_rgb
from keras_vit.augment import check_rand_augment, rand_augment
from keras_vit.images import DECODE_PILLOW, decode, decode_eager, inspect_many, is_image_name, list_images, model_view

if TYPE_CHECKING:
    from keras_vit.images import ImageInfo

log = logging.getLogger(__name__)


ARCHIVE_EXTENSIONS = (".tgz", ".tar", ".tar.gz", ".gz")
AUTOTUNE = tf.data.AUTOTUNE


class Split:
    """One split of a dataset: uint8 RGB images and int labels, with the class names.

    Held in memory (`images` (N, H, W, 3), `labels` (N,)) for datasets that fit and share one
    size; streamed from files (`files`: an `ImageFiles` of paths or encoded bytes, decoded as
    they are read: folders and CSV lists of photos of any size); or streamed by the source
    (`stream`: a tf.data.Dataset of (image, label) with `num_examples` known) for large ones
    such as ImageNet from tfds. `names` name each image where known (the end-of-run report lists
    images by them); `skipped` holds the source's unreadable files as (name, reason).
    """

    def __init__(self, images: np.ndarray | None, labels: np.ndarray | None, class_names: Sequence[str], origin: str,
                 stream: tf.data.Dataset | None = None, num_examples: int | None = None, files: ImageFiles | None = None,
                 names: Sequence[str] | None = None) -> None:
        self.images: Any = images  # None for a streamed split
        self.labels: Any = labels
        self.class_names = list(class_names)
        self.origin = origin
        self.stream = stream
        self.files = files
        self.names = names if names is not None else (files.names if files is not None else None)
        self.skipped: list[tuple[str, str]] = []
        self.num_examples = len(labels) if stream is None else int(num_examples)  # type: ignore[arg-type]

    def __len__(self):
        return self.num_examples

    def elements(self) -> tf.data.Dataset:
        """A tf.data.Dataset of (uint8 image, int label)."""
        if self.stream is not None:
            return self.stream
        if self.files is not None:
            return self.files.decoded(self.files.listing(self.labels))
        return tf.data.Dataset.from_tensor_slices((self.images, self.labels))

    def take(self, indices: np.ndarray | Sequence[int], name: str) -> Split:
        """The examples at `indices`, as a Split named `origin [name]`."""
        if self.stream is not None:
            raise ValueError(f"{self.origin} is streamed; split it with the source's own slicing "
                             "(for tfds: validation_split does this).")
        indices = np.asarray(indices, dtype=np.int64)
        names = None if self.names is None else [self.names[i] for i in indices]
        origin = f"{self.origin} [{name}]"
        if self.files is not None:
            split = Split(None, self.labels[indices], self.class_names, origin, files=self.files.take(indices))
        else:
            split = Split(self.images[indices], self.labels[indices], self.class_names, origin, names=names)
        split.skipped = self.skipped
        return split

    def __repr__(self):
        shape = ("streamed" if self.stream is not None else "files" if self.files is not None
                 else f"{self.images.shape[1:]}")
        return f"Split({self.origin}: {len(self)} images {shape}, {len(self.class_names)} classes)"


class ImageFiles:
    """Encoded images a Split streams: paths on disk or the bytes of an archive's members, with what
    each header said (`keras_vit.images.inspect`: EXIF orientation, which decoder reads it)."""

    def __init__(self, sources: Sequence[str | bytes], infos: Sequence[ImageInfo],
                 names: Sequence[str] | None = None) -> None:
        self.sources = list(sources)
        self.names: list[Any] = list(names) if names is not None else [os.fspath(s) for s in self.sources]
        self.orientation = np.asarray([i.orientation for i in infos], np.int32).reshape(-1)
        self.decoder = np.asarray([i.decoder for i in infos], np.int32).reshape(-1)
        self.on_disk = not self.sources or not isinstance(self.sources[0], bytes)

    def __len__(self):
        return len(self.sources)

    def take(self, indices: np.ndarray | Sequence[int]) -> ImageFiles:
        taken = ImageFiles([], [])
        taken.sources = [self.sources[i] for i in indices]
        taken.names = [self.names[i] for i in indices]
        taken.orientation, taken.decoder = self.orientation[indices], self.decoder[indices]
        taken.on_disk = self.on_disk
        return taken

    def listing(self, labels: np.ndarray) -> tf.data.Dataset:
        """A tf.data.Dataset of (source, label, orientation, decoder): the files, not yet read."""
        sources = [os.fspath(s) for s in self.sources] if self.on_disk else self.sources
        return tf.data.Dataset.from_tensor_slices((tf.constant(sources, tf.string), np.asarray(labels, np.int64),
                                                   self.orientation, self.decoder))

    def decoded(self, listing: tf.data.Dataset) -> tf.data.Dataset:
        """`listing`'s files read and decoded in parallel: a tf.data.Dataset of (uint8 RGB image, label),
        and whatever the listing carries after its four fields."""
        pillow = bool(np.any(self.decoder == DECODE_PILLOW))
        on_disk = self.on_disk

        def read(source, label, orientation, decoder, *rest):
            data = tf.io.read_file(source) if on_disk else source
            return (decode(data, orientation, decoder, pillow=pillow), label, *rest)

        return listing.map(read, num_parallel_calls=AUTOTUNE, deterministic=True)

    def read(self, index: int) -> np.ndarray:
        """One image, decoded here (numpy uint8 RGB)."""
        from keras_vit.images import ImageInfo

        source: Any = self.sources[index]
        if self.on_disk:
            with open(source, "rb") as f:
                source = f.read()
        info = ImageInfo("", 1, 1, int(self.orientation[index]), int(self.decoder[index]))
        try:
            return decode_eager(source, info)
        except ValueError as e:
            raise ValueError(f"{self.names[index]} is not an image that can be read: {e}") from None


def _as_rgb_uint8(images, origin):
    """(N, H, W) or (N, H, W, 1|3|4) numbers in [0, 255] -> (N, H, W, 3) uint8."""
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or images.shape[-1] not in (1, 3, 4):
        raise ValueError(f"{origin}: images must be (N, H, W) or (N, H, W, 1|3|4), got shape {images.shape}.")
    images = to_rgb(images, origin)
    if images.dtype != np.uint8:
        if images.size and (images.min() < 0 or images.max() > 255):
            raise ValueError(f"{origin}: pixel values must lie in [0, 255], found [{images.min()}, {images.max()}].")
        images = np.round(images).astype(np.uint8)
    return images


def from_arrays(images: np.ndarray | Sequence[np.ndarray], labels: np.ndarray | Sequence[int],
                class_names: Sequence[str] | None = None, origin: str = "arrays") -> Split:
    """A Split from in-memory images (a dense array or a list of equal-size arrays) and labels."""
    if isinstance(images, (list, tuple)):
        shapes = {np.shape(im) for im in images}
        if len(shapes) > 1:
            first = np.shape(images[0])
            bad = next(i for i, im in enumerate(images) if np.shape(im) != first)
            raise ValueError(
                f"{origin}: images of mixed sizes: image 0 is {first}, image {bad} is {np.shape(images[bad])}. "
                "Resize them to one size first."
            )
        images = np.stack(images) if images else np.zeros((0, 1, 1, 3), np.uint8)
    labels = np.asarray(labels).astype(np.int64).reshape(-1)
    array = _as_rgb_uint8(images, origin)
    if len(array) != len(labels):
        raise ValueError(f"{origin}: {len(array)} images but {len(labels)} labels.")
    if len(array) == 0:
        raise ValueError(f"{origin}: no images; refusing to train or evaluate on zero examples.")
    if class_names is None:
        class_names = [str(i) for i in range(int(labels.max()) + 1)]
    if labels.min() < 0 or labels.max() >= len(class_names):
        raise ValueError(f"{origin}: labels must lie in [0, {len(class_names) - 1}], found [{labels.min()}, {labels.max()}].")
    return Split(array, labels, class_names, origin)


def stratified_split(split: Split, fraction: float, seed: int = 0,
                     names: tuple[str, str] = ("train", "validation")) -> tuple[Split, Split]:
    """Splits off `fraction` of every class (shuffled with `seed`); returns (rest, held_out)."""
    if split.stream is not None:
        raise ValueError(f"{split.origin} is streamed; split it with the source's own slicing "
                         "(for tfds: validation_split does this).")
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"split fraction must be in (0, 1), got {fraction}.")
    rng = np.random.default_rng(seed)
    held: list[np.ndarray] = []
    for c in np.unique(split.labels):
        idx = np.flatnonzero(split.labels == c)
        rng.shuffle(idx)
        held.extend(idx[: max(1, int(round(len(idx) * fraction)))])
    mask = np.zeros(len(split), bool)
    mask[held] = True
    rest_idx, held_idx = np.flatnonzero(~mask), np.flatnonzero(mask)
    rng.shuffle(rest_idx)
    rng.shuffle(held_idx)
    return split.take(rest_idx, names[0]), split.take(held_idx, names[1])


def load_digits(seed: int = 0, test_fraction: float = 0.2) -> dict[str, Split]:
    """scikit-learn's 1,797 8x8 digits as RGB uint8, split stratified 80/20 with a fixed seed.

    Needs scikit-learn: pip install "keras-vit[digits]".
    """
    datasets = require("sklearn.datasets", "digits", package="scikit-learn", what="the digits data set")
    digits = datasets.load_digits()
    images = digits.images * (255.0 / 16.0)  # 0..16 grey levels -> 0..255
    split = from_arrays(images, digits.target, [str(d) for d in range(10)], origin="sklearn digits")
    train, test = stratified_split(split, test_fraction, seed=seed, names=("train", "test"))
    return {"train": train, "test": test}


def load_fashion_items(folder: str | os.PathLike | None = None) -> dict[str, Split]:
    """Fashion-MNIST (28x28 grey, 10 classes) from the four IDX files of Debian's dataset-fashion-mnist
    (/usr/share/datasets/fashion-mnist), as RGB uint8: its own 60,000 / 10,000 train / test split.

    Example:
    <!-- not run: needs Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) -->
    >>> splits = load_fashion_items()
    >>> len(splits["train"]), splits["train"].class_names[:2]
    (60000, ['t-shirt_top', 'trouser'])
    """
    from keras_vit.dense.scenes import FASHION_CLASSES, FASHION_MNIST_DIR, load_fashion_mnist

    items = load_fashion_mnist(folder or FASHION_MNIST_DIR)
    return {split: from_arrays(np.repeat(x[..., None], 3, axis=-1), y, list(FASHION_CLASSES),
                               origin=f"fashion-mnist {split}") for split, (x, y) in items.items()}


def _decode_all(items, infos, origin):
    """Decodes encoded images [(name, bytes)] in parallel into one uint8 array (one upright size)."""
    files = ImageFiles([b for _, b in items], infos, [n for n, _ in items])
    ds = files.decoded(files.listing(np.zeros(len(items), np.int64))).map(lambda image, _: image)
    try:
        return np.stack(list(ds.as_numpy_iterator()))
    except tf.errors.InvalidArgumentError:
        for i in range(len(items)):  # find the culprit; only on the error path
            files.read(i)
        raise


# Names of the split folders a data folder may have (FOLDER/{train,val,test}/<class>/*): the recipe's
# train_split and test_split, and these for the validation images.
VALIDATION_NAMES = ("val", "validation", "valid")
DEFAULT_TEST_FRACTION = 0.1  # held out of FOLDER/<class>/* (no split of its own) when nothing says otherwise


def _split_key(name, splits):
    """The split a folder or CSV name stands for: one of `splits` or "validation"; else None."""
    if name in splits:
        return name
    return "validation" if name.lower() in VALIDATION_NAMES else None


def _folder_listing(root, splits):
    """{split: [(name, path, class)]} of `root/<split>/<class>/**` or, without split folders,
    {None: [...]} of `root/<class>/**`; the count of other (non-image) files."""
    if not os.path.isdir(root):
        raise ValueError(f"Data folder {root} does not exist or is not a folder.")
    try:
        subdirs = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    except OSError as e:
        raise ValueError(f"Cannot read the data folder {root}: {e.strerror}.") from None
    first = os.path.join(root, splits[0])
    split_layout = os.path.isdir(first) and any(e.is_dir() for e in os.scandir(first))
    groups = {}
    if split_layout:
        for name in subdirs:
            key = _split_key(name, splits)
            if key is not None:
                groups[key] = os.path.join(root, name)
    elif splits[0] in subdirs and not list_images(first, recursive=False)[0]:  # a split folder, empty
        raise ValueError(f"{first} has no class folders; expected {first}/<class>/<image files>.")
    else:
        if not subdirs:
            raise ValueError(f"Data folder {root} has no class folders; expected {root}/<class>/<images> "
                             f"(split here) or {root}/{splits[0]}/<class>/<images>.")
        groups[None] = root
    out, others = {}, 0
    for key, folder in groups.items():
        classes = sorted(e.name for e in os.scandir(folder) if e.is_dir() and not e.name.startswith("."))
        if not classes:
            raise ValueError(f"{folder} has no class folders; expected {folder}/<class>/<image files>.")
        rows = []
        for cls in classes:
            files, other = list_images(os.path.join(folder, cls))
            others += len(other)
            if not files:
                raise ValueError(f"Class folder {os.path.join(folder, cls)} has no images "
                                 f"({', '.join(IMAGE_EXTENSIONS)}).")
            rows.extend((f, f, cls) for f in files)
        out[key] = rows
    return out, others


def _csv_listing(path, splits):
    """{split or None: [(name, path, class)]} from a CSV of `path,label[,split]` lines (paths relative
    to the CSV's folder; an optional header line names the columns)."""
    base = os.path.dirname(os.path.abspath(path))
    out = {}
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = [r for r in csv.reader(line for line in f if not line.startswith("#"))
                    if r and any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"Cannot read the CSV {path}: {e}.") from None
    header = bool(rows) and [c.strip().lower() for c in rows[0][:2]] == ["path", "label"]
    for number, row in enumerate(rows[1:] if header else rows, 2 if header else 1):
        if len(row) not in (2, 3) or not row[0].strip() or not row[1].strip():
            raise ValueError(f"{path}, row {number}: expected path,label or path,label,split; got {row!r}.")
        key = None
        if len(row) == 3 and row[2].strip():
            key = _split_key(row[2].strip(), splits)
            if key is None:
                raise ValueError(f"{path}, row {number}: unknown split {row[2].strip()!r}; use "
                                 f"{', '.join(splits)} or val.")
        file = os.path.join(base, row[0].strip())
        out.setdefault(key, []).append((file, file, row[1].strip()))
    if not out:
        raise ValueError(f"{path} lists no images; expected lines of path,label (an optional third column: "
                         f"the split, {', '.join(splits)} or val).")
    if None in out and len(out) > 1:
        raise ValueError(f"{path}: some lines name a split and some do not; name one on every line or on none.")
    return out, 0


def _archive_listing(path, splits):
    """{split: [(name, bytes, class)]} of an archive's `[top/]<split>/<class>/*`, or {None: ...} of
    `[top/]<class>/*` when it has no split folders; the count of other files."""
    members, others = [], 0
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                if not member.isfile():
                    continue
                if not is_image_name(member.name):
                    others += 1
                    continue
                parts = member.name.strip("./").split("/")
                if len(parts) >= 2:
                    members.append((parts, f"{path}:{member.name}", archive.extractfile(member).read()))
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ValueError(f"Cannot read the image archive {path}: {e}.") from None
    out = {}
    split_layout = any(len(p) >= 3 and p[-3] == splits[0] for p, _, _ in members)
    for parts, name, data in members:
        if split_layout:
            key = _split_key(parts[-3], splits) if len(parts) >= 3 else None
            if key is not None:
                out.setdefault(key, []).append((name, data, parts[-2]))
        else:
            out.setdefault(None, []).append((name, data, parts[-2]))
    if not out:
        raise ValueError(f"{path} has no images under {splits[0]}/<class>/; expected [top/]{splits[0]}/<class>/<images> "
                         "or [top/]<class>/<images>.")
    for key in out:
        out[key].sort(key=lambda row: (row[2], row[0]))
    return out, others


def _listing(spec, splits):
    """(kind, {split or None: [(name, source, class)]}, other files) of a folder, CSV or archive spec."""
    kind, value = data_source(spec)
    if kind == "folder":
        return kind, *_folder_listing(value, splits)
    if kind == "csv":
        return kind, *_csv_listing(value, splits)
    if kind == "archive":
        return kind, *_archive_listing(value, splits)
    raise ValueError(f"{spec} is a {kind} data source, not image files.")


def _scan(rows, what, strict):
    """Reads every listed file's header (never its pixels); returns (usable rows and their ImageInfos,
    skipped [(name, reason)]). One summary line names what is left out; `strict` refuses instead."""
    infos = inspect_many([row[1] for row in rows])
    kept, skipped = [], []
    for row, info in zip(rows, infos):
        if info.problem is None:
            kept.append((row, info))
        else:
            skipped.append((row[0], info.problem))
    if skipped:
        shown = "; ".join(f"{name} ({reason})" for name, reason in skipped[:5])
        more = f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        if strict:
            raise ValueError(f"{what}: {len(skipped)} of {len(rows)} files cannot be used (strict=true refuses them): "
                             f"{shown}{more}. Remove or repair them, or leave strict off to skip them.")
        log.warning("skipped %d of %d files of %s that cannot be used: %s%s", len(skipped), len(rows), what,
                    shown, more)
    if not kept:
        raise ValueError(f"{what}: none of its {len(rows)} image files can be read"
                         + (f" ({skipped[0][0]}: {skipped[0][1]})" if skipped else "") + ".")
    return kept, skipped


def _files_split(kept, class_names, origin, in_memory=False):
    """A Split of scanned rows [((name, source, class), info)]: streamed from its files, or (archives
    whose images share one upright size and fit IN_MEMORY_LIMIT) decoded into memory once."""
    index = {c: i for i, c in enumerate(class_names)}
    labels = np.asarray([index[row[2]] for row, _ in kept], np.int64)
    names = [row[0] for row, _ in kept]
    infos = [info for _, info in kept]
    if in_memory and kept:
        sizes = {info.upright_size for info in infos}
        if len(sizes) == 1 and len(kept) * 3 * np.prod(next(iter(sizes))) <= IN_MEMORY_LIMIT:
            log.info("decoding %d images of %s", len(kept), origin)
            images = _decode_all([(row[0], row[1]) for row, _ in kept], infos, origin)
            return Split(images, labels, class_names, origin, names=names)
    return Split(None, labels, class_names, origin, files=ImageFiles([row[1] for row, _ in kept], infos, names))


def file_splits(spec: str | os.PathLike, splits: Sequence[str] = ("train", "test"), *, seed: int = 0,
                test_fraction: float = DEFAULT_TEST_FRACTION, strict: bool = False, decode: bool = True) -> dict[str, Split]:
    """The splits of a folder, a CSV or an archive of images, every file's header read first.

    `FOLDER/<split>/<class>/**` (and `val/` or `validation/`, returned as "validation"),
    `FOLDER/<class>/**` with no split of its own (`test_fraction` of every class held out as
    `splits[-1]`, seeded), a CSV of `path,label[,split]` lines, or an archive of either folder
    layout. Unreadable files are left out and named in one summary line (`strict=True` refuses
    them); each Split's `skipped` lists them. Folders and CSVs stream from disk; an archive whose
    images share one size is decoded into memory once, as before (`decode=False`: streamed from
    its bytes, for a caller that reads a few).

    Example:
    >>> splits = file_splits("my_photos", seed=0, test_fraction=0.2)   # my_photos/<class>/*.jpg
    >>> splits["train"], splits["test"]
    """
    kind, listed, others = _listing(spec, splits)
    if others:
        log.info("%s: %d files without an image extension (%s) left out", spec, others, ", ".join(IMAGE_EXTENSIONS))
    rows = [(*row, key) for key, group in listed.items() for row in group]
    kept, skipped = _scan(rows, spec, strict)
    class_names = sorted({row[2] for group in listed.values() for row in group})
    usable = {c: 0 for c in class_names}
    for row, _ in kept:
        usable[row[2]] += 1
    empty = [c for c, n in usable.items() if not n]
    if empty:
        raise ValueError(f"{spec}: class(es) {', '.join(empty)} have no readable images; remove the class "
                         "folder(s) or add images.")
    by_key: dict[Any, list] = {}
    for row, info in kept:
        by_key.setdefault(row[3], []).append((row, info))
    out = {}
    in_memory = kind == "archive" and decode
    if None in by_key:  # no split of its own: a seeded, stratified test split
        few = [c for c, n in usable.items() if n < 2]
        if few:
            raise ValueError(f"{spec}: class(es) {', '.join(few)} have one readable image; a class needs two, "
                             "one to train on and one to test.")
        whole = _files_split(by_key[None], class_names, str(spec), in_memory)
        out["train"], out["test"] = stratified_split(whole, test_fraction, seed=seed, names=("train", "test"))
        log.info("%s has no split folders: %g%% of every class held out as its test split (seed %d)",
                 spec, 100 * test_fraction, seed)
    for key, group in by_key.items():
        if key is not None:
            origin = (f"{spec}:{key}" if kind == "archive" else os.path.join(os.fspath(spec), key)
                      if kind == "folder" else f"{spec} [{key}]")
            out[key] = _files_split(group, class_names, origin, in_memory)
    for name in splits:
        if name in out:
            continue
        if None in by_key:
            raise ValueError(f"{spec} has no split folders: its splits are train and test (test held out, seeded), "
                             f"not {name!r}.")
        if len(splits) > 1 and name == splits[-1] and splits[0] in out:
            out[splits[0]], out[name] = stratified_split(out[splits[0]], test_fraction, seed=seed, names=(splits[0], name))
            log.info("%s has no %s split: %g%% of every class of %s held out as it (seed %d)", spec, name,
                     100 * test_fraction, splits[0], seed)
            continue
        raise ValueError(f"Data {'folder' if kind == 'folder' else kind} {spec} has no '{name}' split; expected "
                         f"{spec}/{name}/<class>/<images>.")
    out = {k: v for k, v in out.items() if k in splits or k == "validation"}
    for split in out.values():
        split.skipped = skipped
    return out


SPLIT_RECORD = "data_split.csv"  # in the model dir: which file went to which split, a data spec itself
_RECORD_HEAD = "# keras-vit data split: "


def training_splits(spec: str | os.PathLike, *, train_split: str = "train", test_split: str = "test", seed: int = 0,
                    test_fraction: float = DEFAULT_TEST_FRACTION, validation_split: float = 0.0,
                    max_train_examples: int | None = None, strict: bool = False, record_dir: str | os.PathLike | None = None,
                    write_record: bool = True) -> tuple[Split, Split | None, Split]:
    """(train, validation or None, test) Splits of a folder or a CSV for a training run, streamed.

    As `file_splits`, then a stratified subset of `max_train_examples` training images and a
    stratified `validation_split` of them held out (unless the data has its own `val/` split),
    all seeded. With `record_dir` (the model dir), the split is written there as `data_split.csv`
    (path,label,split lines; itself a data spec) and read back by the next run with the same
    settings, so a resumed or re-run job trains and tests on the same files even when files were
    added to or removed from the folder since.
    """
    from keras_vit._files import atomic_path

    settings = {"data": os.path.abspath(os.fspath(spec)), "seed": seed, "test_fraction": test_fraction,
                "validation_split": validation_split, "max_train_examples": max_train_examples,
                "train_split": train_split, "test_split": test_split}
    record = os.path.join(record_dir, SPLIT_RECORD) if record_dir else None
    recorded = _read_record(record, settings, strict) if record and os.path.isfile(record) else None
    if recorded is not None:
        train, validation, test = recorded
        _note_unrecorded(spec, (train_split, test_split), record)
    else:
        splits = file_splits(spec, (train_split, test_split), seed=seed, test_fraction=test_fraction, strict=strict)
        train, test, validation = splits[train_split], splits[test_split], splits.get("validation")
        if max_train_examples and int(max_train_examples) < len(train):
            train, _ = stratified_split(train, 1.0 - int(max_train_examples) / len(train), seed=seed)
        if validation is not None:
            if validation_split:
                log.info("%s has its own validation split (%d images): validation_split=%g is not used", spec,
                         len(validation), validation_split)
        elif validation_split:
            train, validation = stratified_split(train, validation_split, seed=seed)
    if record and write_record and recorded is None:
        lines = [_RECORD_HEAD + json.dumps({**settings, "class_names": train.class_names}) + "\n"]
        lines += [f"# skipped: {name}\t{reason}\n" for name, reason in train.skipped]
        with atomic_path(record, suffix=".csv") as tmp:
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                f.writelines(lines)
                writer = csv.writer(f)
                writer.writerow(["path", "label", "split"])
                for name, split in ((train_split, train), ("val", validation), (test_split, test)):
                    if split is not None:
                        writer.writerows([os.path.abspath(path), split.class_names[label], name]
                                         for path, label in zip(split.files.names, split.labels))
    return train, validation, test


def _read_record(record, settings, strict):
    """The (train, validation, test) a `data_split.csv` records when it was made with `settings`, else None."""
    with open(record, encoding="utf-8") as f:
        head = f.readline()
    try:
        saved = json.loads(head[len(_RECORD_HEAD):]) if head.startswith(_RECORD_HEAD) else None
    except ValueError:
        saved = None
    if not isinstance(saved, dict) or {k: saved.get(k) for k in settings} != settings:
        log.info("%s was made for other data or settings: making a new split (it is replaced)", record)
        return None
    names = (settings["train_split"], settings["test_split"])
    listed, _ = _csv_listing(record, names)
    rows = [(*row, key) for key, group in listed.items() for row in group]
    kept, skipped = _scan(rows, record, strict)
    class_names = list(saved["class_names"])
    by_key = {}
    for row, info in kept:
        by_key.setdefault(row[3], []).append((row, info))
    missing = [key for key in names if key not in by_key]
    if missing:
        raise ValueError(f"{record}: none of its {missing[0]} images can be read any more; train into a new "
                         "--model-dir to split the data afresh.")
    log.info("the split recorded in %s: the same files as the run that wrote it", record)
    splits = [_files_split(by_key[key], class_names, f"{settings['data']} [{key}]") if key in by_key else None
              for key in (names[0], "validation", names[1])]
    for split in splits:
        if split is not None:
            split.skipped = skipped
    return tuple(splits)


def _note_unrecorded(spec, names, record):
    """One line when the data holds images that the recorded split does not (added since it was made)."""
    try:
        _, listed, _ = _listing(spec, names)
        recorded, _ = _csv_listing(record, names)
    except ValueError:
        return
    known = {os.path.abspath(row[0]) for group in recorded.values() for row in group}
    with open(record, encoding="utf-8") as f:  # files the first run skipped are not new either
        known |= {os.path.abspath(line[len("# skipped: "):].split("\t", 1)[0]) for line in f
                  if line.startswith("# skipped: ")}
    new = [row[0] for group in listed.values() for row in group if os.path.abspath(row[0]) not in known]
    if new:
        log.warning("%d images of %s are not in the split recorded in %s (added since?): they are not used; "
                    "train into a new --model-dir to split the data afresh", len(new), spec, record)


def load_image_folder(root: str | os.PathLike, splits: Sequence[str] = ("train", "test"), **kwargs: Any) -> dict[str, Split]:
    """The splits of a folder of images, streamed from disk: `root/<split>/<class>/**` (and
    `root/val/<class>/**` as "validation"), or `root/<class>/**` split here (seeded). Any size and
    format; see `file_splits` for the arguments.
    """
    if not os.path.isdir(root):
        raise ValueError(f"Data folder {root} does not exist or is not a folder.")
    return file_splits(os.fspath(root), splits, **kwargs)


def load_image_archive(path: str | os.PathLike, splits: Sequence[str] = ("train", "test"), **kwargs: Any) -> dict[str, Split]:
    """Reads a .tar/.tgz holding `[top/]<split>/<class>/*.jpg` (the layout of cifar10-jpeg.tgz) or
    `[top/]<class>/*`; see `file_splits`."""
    return file_splits(os.fspath(path), splits, **kwargs)


# How `keras-vit train` takes a folder of images in place of a tfds data set.
TRAIN_LOCAL_DATA = "--set data=FOLDER"
IN_MEMORY_LIMIT = 2 * 1024**3  # bytes of decoded images; larger tfds datasets are streamed


def load_tfds(name: str, splits: Sequence[str] = ("train", "test"), data_dir: str | os.PathLike | None = None, *,
              local_data: str = TRAIN_LOCAL_DATA) -> dict[str, Split]:
    """A tfds dataset (e.g. "cifar10", "imagenet2012"); needs it prepared or internet access.

    Small datasets of one image size are read into memory; large ones (ImageNet) are
    streamed from the tfds files, decoded and cropped per example. Split names may use
    tfds slicing ("train[:98%]"). `local_data`: how the caller takes a folder instead, for
    the error offline (train's `--set data=FOLDER`, fewshot's `--data FOLDER`).
    """
    tfds = require("tensorflow_datasets", "tfds", package="tensorflow-datasets", what=f"the tfds data set {name!r}")

    builder = tfds.builder(name, data_dir=data_dir)
    if not builder.is_prepared():
        _check_download_possible(name, builder.data_dir, local_data)
    builder.download_and_prepare()
    names = builder.info.features["label"].names
    shape = builder.info.features["image"].shape
    out = {}
    for split in splits:
        count = builder.info.splits[split].num_examples
        origin = f"tfds:{name}/{split}"
        if None in shape or count * int(np.prod(shape)) > IN_MEMORY_LIMIT:
            stream = builder.as_dataset(split=split, as_supervised=True, shuffle_files=True,
                                        read_config=tfds.ReadConfig(try_autocache=False))
            out[split] = Split(None, None, names, origin, stream=stream, num_examples=count)
        else:
            images, labels = tfds.as_numpy(builder.as_dataset(split=split, as_supervised=True, batch_size=-1))
            out[split] = from_arrays(images, labels, names, origin=origin)
    return out


TFDS_HOST = ("storage.googleapis.com", 443)  # tfds' own mirror, tried first for catalog datasets


def _network_reachable(address=None, timeout=5.0):
    try:
        socket.create_connection(address or TFDS_HOST, timeout=timeout).close()
        return True
    except OSError:
        return False


def _check_download_possible(name, data_dir, local_data=TRAIN_LOCAL_DATA):
    """Offline, tfds retries a download for minutes and ends in a traceback: say it at once."""
    if not _network_reachable():
        raise ConnectionError(
            f"tfds:{name} is not prepared in {data_dir} and {TFDS_HOST[0]} cannot be reached (offline?). "
            f"Prepare it once where there is network (python -c \"import tensorflow_datasets as tfds; "
            f"tfds.builder('{name}').download_and_prepare()\"; $TFDS_DATA_DIR picks the folder), or use "
            f"images that are here: {local_data}, a folder or an archive (.tgz) of train/<class>/ and test/<class>/.")


def _debian_fashion_mnist():
    from keras_vit.dense.scenes import FASHION_MNIST_DIR

    return os.path.isfile(os.path.join(FASHION_MNIST_DIR, "train-images-idx3-ubyte.gz"))


def data_source(spec: str | os.PathLike) -> tuple[str, str | None]:
    """The one reading of a data spec: what it names, as (kind, value).

    "digits" -> ("digits", None); "fashion_mnist" -> ("fashion_mnist", None) where Debian's
    dataset-fashion-mnist is installed (else tfds' fashion_mnist); "tfds:NAME" or a bare name that is no path -> ("tfds",
    NAME); an existing folder -> ("folder", path); an existing file (a .tar/.tgz) ->
    ("archive", path), a .csv file -> ("csv", path). A path that does not exist (it has a
    separator or an archive's extension) is a ValueError naming it.

    Example:
    >>> data_source("tfds:cifar10")
    ('tfds', 'cifar10')
    """
    spec = os.fspath(spec)
    if spec == "digits":
        return "digits", None
    if spec == "fashion_mnist" and _debian_fashion_mnist():
        return "fashion_mnist", None  # the local files, not a download
    if spec.startswith("tfds:"):
        return "tfds", spec[len("tfds:"):]
    if os.path.isdir(spec):
        return "folder", spec
    if os.path.isfile(spec):
        return ("csv" if spec.lower().endswith(".csv") else "archive"), spec
    if os.sep in spec or spec.endswith(ARCHIVE_EXTENSIONS + (".csv",)):
        raise ValueError(f"Data path {spec} does not exist: give an existing folder of <class>/ images (or of "
                         "train/<class>/ and test/<class>/), a CSV of path,label lines, an archive (.tgz) of a "
                         "folder, digits (scikit-learn's, installed with keras-vit[digits]) or tfds:NAME.")
    return "tfds", spec


def load_data(spec: str | os.PathLike, splits: Sequence[str] = ("train", "test"), *, local_data: str = TRAIN_LOCAL_DATA,
              **kwargs: Any) -> dict[str, Split]:
    """Resolves a data spec (see `data_source`): "digits", "tfds:NAME", a folder, a CSV, a .tar/.tgz,
    or a tfds name. `kwargs` go to `file_splits` for folders, CSVs and archives (seed, test_fraction,
    strict, decode).

    `local_data`: how the caller takes a folder instead of tfds, named when tfds is offline."""
    kind, value = data_source(spec)
    if kind == "fashion_mnist":
        return load_fashion_items()
    if kind == "digits":
        return load_digits()
    if kind in ("folder", "csv", "archive"):
        return file_splits(cast(str, value), splits, **kwargs)
    return load_tfds(cast(str, value), splits, local_data=local_data)


# --- preprocessing and augmentation, in the graph -------------------------------------

OFFICIAL_STATS = (0.5, 0.5, 0.5)  # mean and std of the official scaling: pixels to [-1, 1]


def _checked_stats(pixel_mean, pixel_std):
    mean, std = tuple(float(m) for m in pixel_mean), tuple(float(s) for s in pixel_std)
    if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
        raise ValueError(f"pixel_mean and pixel_std take 3 values (R, G, B; std > 0), got {pixel_mean!r} and "
                         f"{pixel_std!r}.")
    return mean, std


def to_model_range(images: tf.Tensor, pixel_mean: Sequence[float] = OFFICIAL_STATS,
                   pixel_std: Sequence[float] = OFFICIAL_STATS) -> tf.Tensor:
    """uint8 [0, 255] -> float32 model inputs, as `keras_vit.preprocess_input(x, model=model)`: [-1, 1]
    (the official scaling) by default, else (x / 255 - pixel_mean) / pixel_std per channel, a
    checkpoint's own statistics (ImageNet's for DeiT and DINOv2, CLIP's own for CLIP)."""
    x = tf.cast(images, tf.float32)
    mean, std = _checked_stats(pixel_mean, pixel_std)
    if mean == OFFICIAL_STATS and std == OFFICIAL_STATS:
        return scale_pixels(x)
    # preprocess_input's arithmetic, so training and serving (exports, predict) scale alike to the last bit
    scale = tf.constant([1.0 / (255.0 * s) for s in std], tf.float32)
    offset = tf.constant([m / s for m, s in zip(mean, std)], tf.float32)
    return x * scale - offset


def inception_crop(image: tf.Tensor, size: Sequence[int], min_area: float = 0.05,
                   seed: tf.Tensor | None = None) -> tf.Tensor:
    """Random crop covering min_area-100% of the image, aspect 3/4-4/3, resized to `size`."""
    begin, crop_size, _ = tf.image.sample_distorted_bounding_box(
        tf.shape(image), tf.zeros((0, 0, 4), tf.float32), min_object_covered=0.0,
        aspect_ratio_range=(3 / 4, 4 / 3), area_range=(min_area, 1.0), max_attempts=10,
        use_image_if_no_bounding_boxes=True, seed=seed or 0)
    crop = tf.slice(image, begin, crop_size)
    return tf.image.resize(crop, size, method="bilinear", antialias=True)


def pad_crop(image: tf.Tensor, size: Sequence[int], pad: int) -> tf.Tensor:
    """Pads by `pad` pixels (reflect) and takes a random crop of `size`: the CIFAR standard
    (an image of another size is resized to `size` first, antialiased)."""
    image = model_view(image, size)
    image = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]], mode="REFLECT")
    return tf.image.random_crop(image, tuple(size) + (3,))


def center_resize(image: tf.Tensor, size: Sequence[int], crop_fraction: float = 1.0,
                  interpolation: str = "bilinear") -> tf.Tensor:
    """Evaluation: central crop of `crop_fraction` of the shorter side, resized to `size`: the
    model's view of an image, `keras_vit.images.model_view`."""
    return model_view(image, size, crop_fraction, interpolation)


def make_dataset(split: Split, image_size: int | Sequence[int], batch_size: int, *, training: bool,
                 num_classes: int | None = None, crop: str = "pad", min_area: float = 0.05, pad: int = 4,
                 flip: bool = True, randaugment: Sequence[float] | None = None, mixup: float = 0.0,
                 cutmix: float = 0.0, crop_fraction: float = 1.0, seed: int = 0, repeat: bool = False,
                 drop_remainder: bool | None = None, interpolation: str = "bilinear",
                 with_index: bool = False, pixel_mean: Sequence[float] = OFFICIAL_STATS,
                 pixel_std: Sequence[float] = OFFICIAL_STATS) -> tf.data.Dataset:
    """A batched tf.data pipeline of (model inputs, one-hot float labels) from a Split.

    The images are scaled as the model's inputs were normalized: [-1, 1] by default (the official
    scaling), or (x / 255 - pixel_mean) / pixel_std with a checkpoint's own statistics (`to_model_range`;
    a model's are `model.pixel_mean`, `model.pixel_std`).

    Training: shuffle (seeded), crop ("inception": area `min_area`-100%; "pad": reflect-pad
    and random crop; "none": resize), horizontal flips, optional RandAugment (num_ops,
    magnitude on the paper's 0-10 scale: keras_vit.augment), then MixUp / CutMix on batches (alpha > 0 enables,
    one of them per batch when both are set). Evaluation: the model's view, `keras_vit.images.model_view`
    (central crop of `crop_fraction` of the shorter side, `interpolation` resize).

    A Split streamed from files is shuffled as a list of paths (all of them: the buffer holds names,
    not pixels) and decoded in parallel as it is read; a file that fails to decode after its header
    passed is dropped with TensorFlow's message in the log rather than stopping a run. With
    `with_index` (evaluation only) the batches are (images, labels, index in the split): the
    end-of-run report lines predictions up with files.
    """
    size = tuple(image_size) if not isinstance(image_size, int) else (image_size, image_size)
    num_classes = num_classes or len(split.class_names)
    pixel_mean, pixel_std = _checked_stats(pixel_mean, pixel_std)  # here, not inside a traced map function

    def scaled(image):
        return to_model_range(image, pixel_mean, pixel_std)

    if len(split) == 0:
        raise ValueError(f"{split.origin}: no images; refusing to train or evaluate on zero examples.")
    if with_index and training:
        raise ValueError("with_index is for evaluation pipelines.")
    files = split.files
    ds = files.listing(split.labels) if files is not None else split.elements()
    if with_index:
        ds = tf.data.Dataset.zip((ds, tf.data.Dataset.range(len(split)))).map(lambda element, i: (*element, i))
    if training:
        buffer = len(split) if files is not None else min(len(split), 50_000 if split.stream is None else 10_000)
        ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat:
            ds = ds.repeat()
    if files is not None:
        ds = files.decoded(ds).ignore_errors(log_warning=True)
    if training:
        if randaugment:
            num_ops, magnitude = check_rand_augment(randaugment)

        def augment(image, label):
            if crop == "inception":
                image = inception_crop(image, size, min_area)
            elif crop == "pad":
                image = pad_crop(image, size, pad)
            elif crop == "none":
                image = center_resize(image, size)
            else:
                raise ValueError(f"Unknown crop {crop!r}; use 'inception', 'pad' or 'none'.")
            if flip:
                image = tf.image.random_flip_left_right(image)
            if randaugment:
                image = rand_augment(tf.clip_by_value(image, 0, 255), num_ops, magnitude)
            return scaled(tf.clip_by_value(image, 0, 255)), tf.one_hot(label, num_classes)

        ds = ds.map(augment, num_parallel_calls=AUTOTUNE)
        ds = ds.batch(batch_size, drop_remainder=True if drop_remainder is None else drop_remainder)
        if mixup or cutmix:
            ds = ds.map(_batch_mixer(mixup, cutmix, seed), num_parallel_calls=AUTOTUNE)
    else:
        def view(image, label, *index):
            image = scaled(center_resize(image, size, crop_fraction, interpolation))
            return (image, tf.one_hot(label, num_classes), *index)

        ds = ds.map(view, num_parallel_calls=AUTOTUNE)
        ds = ds.batch(batch_size, drop_remainder=bool(drop_remainder))
    options = tf.data.Options()
    # The in-memory tensors can be split by element across workers.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options).prefetch(AUTOTUNE)


@contextlib.contextmanager
def unknown_length_quiet() -> Iterator[None]:
    """Around fit / evaluate on file-streamed splits: their evaluation datasets have no known length
    (a file that fails to decode is dropped, not fatal), so Keras finds the end by reading to it and
    warns "Your input ran out of data; interrupting training" once; nothing is interrupted."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)
        yield


def _batch_mixer(mixup, cutmix, seed):
    import keras

    layers = []
    if mixup:
        layers.append(keras.layers.MixUp(alpha=float(mixup), seed=seed))
    if cutmix:
        layers.append(keras.layers.CutMix(factor=float(cutmix), seed=seed))

    def mix(images, labels):
        data = {"images": images, "labels": labels}
        if len(layers) == 1:
            data = layers[0](data, training=True)
        else:  # one of the two per batch, evenly
            data = tf.cond(tf.random.uniform(()) < 0.5, lambda: layers[0](data, training=True),
                           lambda: layers[1](data, training=True))
        return data["images"], data["labels"]

    return mix


# --- image sets: samples for export parity checks, calibration images for int8 ------------

def _list_images(folder):
    return sorted(
        os.path.join(folder, f) for f in os.listdir(folder)
        if f.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(os.path.join(folder, f))
    )


def _folder_files(folder, class_names, classes, labelled):
    """Files of a folder and their labels: class subfolders (labelled) or images (not)."""
    subdirs = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
    subdirs = [d for d in subdirs if _list_images(os.path.join(folder, d))]
    if not subdirs:
        files = _list_images(folder)
        if not files:
            raise ValueError(
                f"{folder} holds no images ({', '.join(IMAGE_EXTENSIONS)}) and no class folders of images.")
        return files, None
    if not labelled:
        return [f for d in subdirs for f in _list_images(os.path.join(folder, d))], None
    if class_names is None:
        if len(subdirs) != classes:
            raise ValueError(
                f"{folder} has {len(subdirs)} class folders but the model has {classes} classes and no "
                "class_names to match them by name."
            )
        log.info("the model has no class_names: class folders of %s are matched in sorted order", folder)
        index = {d: i for i, d in enumerate(subdirs)}
    else:
        index = {name: i for i, name in enumerate(class_names)}
        unknown = [d for d in subdirs if d not in index]
        if unknown:
            raise ValueError(
                f"class folder(s) {', '.join(unknown)} of {folder} are not classes of the model "
                f"({', '.join(class_names)})."
            )
    files, labels = [], []
    for d in subdirs:
        for f in _list_images(os.path.join(folder, d)):
            files.append(f)
            labels.append(index[d])
    return files, labels


def _check_pixels(images, what):
    """uint8 pixels from pixels in 0-255, or from model inputs in [-1, 1] (a training pipeline's output)."""
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"{what} must be RGB images (N, height, width, 3); got shape {images.shape}.")
    if images.dtype != np.uint8:
        lo, hi = float(np.min(images)), float(np.max(images))
        if lo < 0 and lo >= -1.0 - 1e-3 and hi <= 1.0 + 1e-3:
            log.info("%s are in [-1, 1], preprocessed: mapped back to pixels", what)
            return to_pixels(images)
        elif lo >= 0 and hi <= 1.0:
            raise ValueError(
                f"{what} have values in [{lo:.2f}, {hi:.2f}]: scaled to [0, 1]? Give pixels in 0-255 "
                "(or model inputs in [-1, 1])."
            )
        elif lo < 0 or hi > 255:
            raise ValueError(f"{what} have values in [{lo:.1f}, {hi:.1f}]; expected pixels in 0-255.")
        images = np.clip(np.round(images), 0, 255).astype("uint8")
    return images


def _split_labels(split, class_names, classes, what):
    """A data.Split's labels as indices of the model's classes (matched by name)."""
    if class_names is None or list(split.class_names) == list(class_names):
        if classes is not None and len(split.class_names) > classes:
            raise ValueError(f"{what}: {split.origin} has {len(split.class_names)} classes, the model {classes}.")
        return np.asarray(split.labels)
    index = {name: i for i, name in enumerate(class_names)}
    unknown = [c for c in split.class_names if c not in index]
    if unknown:
        raise ValueError(f"{what}: classes {', '.join(unknown)} of {split.origin} are not classes of the model "
                         f"({', '.join(class_names)}).")
    return np.asarray([index[c] for c in split.class_names])[np.asarray(split.labels)]


def _data_split(spec, split, what):
    """A split of a keras_vit.data source: an archive (.tgz/.tar), a folder, a CSV, "digits" or
    "tfds:NAME". Folders, CSVs and archives come back streamed, nothing decoded: `load_image_set`
    decodes only the images it keeps (200 calibration images need not decode 50,000)."""
    log.info("reading the %s split of %s for the %s", split, spec, what)
    try:
        kind, _ = data_source(spec)
        extra = {"decode": False} if kind in ("folder", "csv", "archive") else {}
        splits = load_data(spec, (split,), **extra)
    except (ValueError, OSError) as e:
        raise ValueError(f"{what}: cannot read the {split} split of {spec}: {e}") from None
    if split not in splits:
        raise ValueError(f"{what}: {spec} has no {split!r} split (it has {', '.join(splits)}).")
    return splits[split]


def _is_data_spec(path, split):
    """Whether `path` is a data source of keras_vit.data (as `data_source` reads it) rather than
    images: a folder is one when it has a `split` subfolder (FOLDER/<class>/* is read as class
    folders of images); a CSV always; only "tfds:NAME" names a tfds set."""
    try:
        kind, _ = data_source(path)
    except ValueError:
        return False
    if kind == "folder":
        return os.path.isdir(os.path.join(path, split))
    if kind == "archive":
        return path.lower().endswith(ARCHIVE_EXTENSIONS)
    return kind in ("digits", "csv") or path.startswith("tfds:")


def load_image_set(source: str | os.PathLike | Sequence[str | os.PathLike] | np.ndarray | tuple | Split | tf.data.Dataset,
                   image_size: int | Sequence[int], *, class_names: Sequence[str] | None = None,
                   classes: int | None = None, labelled: bool = True, split: str = "test", max_images: int | None = None,
                   seed: int = 0, what: str = "images") -> tuple[np.ndarray, np.ndarray | None, str]:
    """Images for parity checks and calibration, as uint8 at `image_size`, with labels if known.

    `source` is one of:
    - a folder of images, or of one subfolder of images per class, named as the model's
      class_names (with `labelled=False` the names are not checked);
    - a data source of `keras_vit.data` (a training recipe's `data`): a `.tgz`/`.tar` of
      `<split>/<class>/` images, a folder `root/<split>/<class>/`, "digits" or
      "tfds:NAME", of which `split` is read; or a `keras_vit.data.Split`;
    - a list of image files; an array (N, H, W, 3) of pixels in 0-255, or a pair
      (images, labels); a tf.data.Dataset of images or (images, labels), batched or not.
    Arrays and datasets in [-1, 1] (a training pipeline's output) are mapped back to
    pixels. A larger set is shuffled (with `seed`) before `max_images` are taken, since
    class folders list their files in class order.

    Returns (images, labels or None, a description of the source).

    Example:
    >>> images, labels, source = load_image_set("../shared/data/cifar10-jpeg.tgz", (32, 32),
    ...                                         class_names=model.class_names, max_images=500)
    """
    rng = np.random.default_rng(seed)
    if isinstance(source, (str, os.PathLike)) and _is_data_spec(os.fspath(source), split):
        source = _data_split(os.fspath(source), split, what)
    if isinstance(source, Split) and source.images is None:
        return _streamed_images(source, image_size, class_names, classes, labelled, max_images, rng, what)
    if isinstance(source, Split):
        labels = _split_labels(source, class_names, classes, what) if labelled else None
        images, labels = _subset(np.asarray(source.images), labels, max_images, rng)
        description = f"{source.origin} ({len(images)} images{', labelled' if labels is not None else ''})"
    elif isinstance(source, (str, os.PathLike)) or (
            isinstance(source, (list, tuple)) and source and isinstance(source[0], (str, os.PathLike))):
        # files are read (and resized) one by one: no pixel check or batch resize below
        return _image_files(source, image_size, class_names, classes, labelled, max_images, rng, what)
    elif isinstance(source, tf.data.Dataset):
        images, labels = _dataset_images(source, labelled, max_images, what)
        description = f"a tf.data.Dataset ({len(images)} images)"
    else:
        labels = None
        if isinstance(source, tuple) and len(source) == 2:
            source, labels = source
            labels = np.asarray(labels).reshape(-1) if labelled else None
        images = np.asarray(source)
        if labels is not None and len(labels) != len(images):
            raise ValueError(f"{what}: {len(images)} images but {len(labels)} labels.")
        images, labels = _subset(images, labels, max_images, rng)
        description = f"an array of {len(images)} images"
    images = _check_pixels(images, what)
    if len(images) == 0:
        raise ValueError(f"{what}: no images.")
    return resize_images(images, image_size), labels, description


def _pick(count, max_images, rng):
    """The indices kept of `count` items: a random `max_images` of more (class-ordered sets would
    give the first classes only), else all in order; the one rule for arrays, files and archives."""
    if max_images and count > max_images:
        return rng.permutation(count)[:max_images]
    return np.arange(count)


def _streamed_images(split, image_size, class_names, classes, labelled, max_images, rng, what):
    """load_image_set for a streamed Split: a random `max_images` of it decoded (`_pick`), each resized."""
    labels = _split_labels(split, class_names, classes, what) if labelled else None
    keep = _pick(len(split), max_images, rng)
    log.info("decoding %d images of %s", len(keep), split.origin)
    if split.files is not None:
        images = [split.files.read(int(i)) for i in keep]
    else:  # a source's own stream (tfds): the first of it, as it comes
        keep = np.arange(min(len(split), max_images or len(split)))
        images = [np.asarray(image) for image, _ in split.stream.take(len(keep))]
    images = np.stack([resize_images(image[None], image_size)[0] for image in images])
    labels = None if labels is None else np.asarray(labels)[keep]
    description = f"{split.origin} ({len(images)} images{', labelled' if labels is not None else ''})"
    return images, labels, description


def _subset(images, labels, max_images, rng):
    """A random `max_images` of a larger set (`_pick`)."""
    if max_images and len(images) > max_images:
        keep = _pick(len(images), max_images, rng)
        images, labels = images[keep], None if labels is None else labels[keep]
    return images, labels


def _image_files(source, image_size, class_names, classes, labelled, max_images, rng, what):
    """load_image_set for a folder, an image file or a list of files."""
    labels = None
    if isinstance(source, (str, os.PathLike)):
        folder = os.fspath(source)
        if not os.path.exists(folder):
            raise FileNotFoundError(f"{what}: {folder} does not exist.")
        if os.path.isdir(folder):
            files, labels = _folder_files(folder, class_names, classes, labelled)
            description = f"{folder}{' (labelled by class folder)' if labels is not None else ''}"
        else:
            files, description = [folder], folder
    else:
        files = [os.fspath(f) for f in source]
        description = f"{len(files)} image files"
    order = _pick(len(files), max_images, rng)
    if len(order) > 100:
        log.info("reading %d %s from %s", len(order), what, description)
    images = np.stack([load_image(files[i], size=image_size) for i in order])
    labels = None if labels is None else np.asarray(labels)[order]
    return images, labels, description


def _dataset_images(source, labelled, max_images, what):
    """load_image_set for a tf.data.Dataset of images or (images, labels), batched or not."""
    batches, label_batches, labels = [], [], None
    count = 0
    for element in source:
        x, y = (element[0], element[1]) if isinstance(element, (tuple, list)) else (element, None)
        x, y = np.asarray(x), None if y is None else np.asarray(y)
        if x.ndim == 3:  # an unbatched dataset
            x, y = x[None], None if y is None else y[None]
        batches.append(x)
        if y is not None:  # class indices, or one-hot / mixed labels
            label_batches.append(y.argmax(-1) if y.ndim == 2 else y.reshape(len(x)))
        count += len(x)
        if max_images and count >= max_images:
            break
    if not batches:
        raise ValueError(f"{what}: the dataset is empty.")
    images = np.concatenate(batches)[:max_images]
    if label_batches and labelled:
        labels = np.concatenate(label_batches)[:max_images]
    return images, labels


__all__ = [
    "Split", "ImageFiles", "file_splits", "training_splits", "SPLIT_RECORD", "from_arrays", "stratified_split",
    "load_digits", "load_image_folder", "load_image_archive",
    "load_tfds", "data_source", "load_data", "load_image_set", "make_dataset", "to_model_range", "inception_crop",
    "pad_crop", "center_resize",
]
