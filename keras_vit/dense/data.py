"""Dense training data: image/mask and image/depth pairs, read as users keep them, and the tf.data
pipeline that crops and flips an image and its target together.

A folder is `FOLDER/images/<name>.<jpg|png|...>` with `FOLDER/masks/<name>.png` (segmentation) or
`FOLDER/depth/<name>.<png|npy>` (depth), optionally under `FOLDER/{train,val,test}/`, and an optional
`FOLDER/classes.txt` (one class name per line, index order). Masks are palette PNGs (their palette
indices are the classes, as PASCAL VOC's) or 8/16-bit grey PNGs whose values are the classes; 255 is
"ignore". Depth is a 16-bit PNG (times `depth_scale`: 0.001 for millimetres, KITTI's 1/256) or a float
`.npy` (never unpickled); 0 is "no depth". Images of any size, EXIF orientation applied, headers checked
before anything is decoded (keras_vit/images.py). A pair whose files cannot be read, or whose target's
size differs from its upright image's, is named and left out (`strict=True` refuses the folder).

Example:
>>> splits = load_dense_folder("tests/data/dense_folder", task="segmentation", test_fraction=0.25)
>>> train = splits["train"]
>>> ds = make_dense_dataset(train, (32, 32), batch_size=2, training=True)
>>> images, masks = next(iter(ds))
>>> tuple(images.shape), tuple(masks.shape)
((2, 32, 32, 3), (2, 32, 32))
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from keras_vit.data import OFFICIAL_STATS, to_model_range
from keras_vit.images import check, inspect, is_image_name, max_image_pixels, read_image

log = logging.getLogger(__name__)

TASKS = ("segmentation", "depth")
TARGET_FOLDERS = {"segmentation": "masks", "depth": "depth"}
IGNORE_INDEX = 255
SPLIT_NAMES = ("train", "val", "test")
AUTOTUNE = tf.data.AUTOTUNE


@dataclasses.dataclass
class DenseSplit:
    """One split of image/target pairs: in memory (`images` (N, H, W, 3) uint8 and `targets` (N, H, W))
    or as file paths (decoded as the pipeline reads them).

    Attributes:
        task: "segmentation" (targets are class indices, 255 ignored) or "depth" (0: no depth).
        images, targets: arrays, or lists of paths.
        class_names: the segmentation classes (None for depth).
        names: each pair's name (its image's path relative to the folder).
        origin: where the split came from, for messages.
        skipped: (name, reason) for each pair left out.
        depth_scale: what a 16-bit depth PNG's unit is, in the depth's unit.
    """

    task: str
    images: Any
    targets: Any
    class_names: list[str] | None = None
    names: list[str] = dataclasses.field(default_factory=list)
    origin: str = "arrays"
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    depth_scale: float = 0.001

    def __len__(self) -> int:
        return len(self.images)

    @property
    def in_memory(self) -> bool:
        return isinstance(self.images, np.ndarray)

    def subset(self, index: Sequence[int]) -> DenseSplit:
        index = list(index)
        pick = ((lambda a: a[np.asarray(index, int)]) if self.in_memory else (lambda a: [a[i] for i in index]))
        return dataclasses.replace(self, images=pick(self.images), targets=pick(self.targets),
                                   names=[self.names[i] for i in index] if self.names else [], skipped=[])


def from_arrays(images: np.ndarray, targets: np.ndarray, task: str = "segmentation",
                class_names: Sequence[str] | None = None, origin: str = "arrays") -> DenseSplit:
    """A DenseSplit of in-memory pairs: images (N, H, W, 3) uint8, targets (N, H, W) class indices or depth.

    Example:
    >>> split = from_arrays(np.zeros((4, 16, 16, 3), np.uint8), np.ones((4, 16, 16), np.uint8))
    >>> len(split), split.class_names
    (4, ['class_0', 'class_1'])
    """
    images, targets = np.asarray(images), np.asarray(targets)
    if task not in TASKS:
        raise ValueError(f"task {task!r}: use one of {TASKS}.")
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"{origin}: images must be (N, H, W, 3) uint8, got {images.shape} {images.dtype}.")
    if targets.shape != images.shape[:3]:
        raise ValueError(f"{origin}: targets {targets.shape} do not match images {images.shape[:3]} (N, H, W).")
    if task == "segmentation" and class_names is None:
        top = int(targets[targets != IGNORE_INDEX].max(initial=0))
        class_names = [f"class_{i}" for i in range(top + 1)]
    return DenseSplit(task, images, targets, list(class_names) if class_names is not None else None,
                      [f"{origin}[{i}]" for i in range(len(images))], origin)


def load_pairs_npz(path: str | os.PathLike, task: str = "segmentation",
                   class_names: Sequence[str] | None = None) -> DenseSplit:
    """A DenseSplit of the pairs in a .npz: `images` (N, H, W, 3) or grey (N, H, W) uint8 and `targets`
    (N, H, W); read without unpickling (saved_models/seg_fashion/test_scenes.npz is one)."""
    name = os.fspath(path)
    try:
        with np.load(name, allow_pickle=False) as arrays:
            images, targets = arrays["images"], arrays["targets"]
    except (KeyError, ValueError, OSError) as e:
        raise ValueError(f"{name}: a .npz of pairs holds `images` and `targets` arrays of numbers ({e}).") from None
    if images.ndim == 3:
        images = np.repeat(images[..., None], 3, axis=-1)
    return from_arrays(images, targets, task, class_names, origin=name)


# --- reading one target ----------------------------------------------------------------

def _png_chunks(data: bytes, name: str) -> dict[str, Any]:
    """A PNG's IHDR fields and its palette (PLTE) as a (K, 3) array, read from the chunk headers only."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{name} is not a PNG; masks are palette or grey PNGs.")
    pos, found = 8, {}
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR" and len(body) >= 13:
            found["width"], found["height"], found["bit_depth"], found["colour_type"] = struct.unpack(
                ">IIBB", body[:10])
        elif kind == b"PLTE":
            found["palette"] = np.frombuffer(body[:len(body) // 3 * 3], np.uint8).reshape(-1, 3)
        elif kind in (b"IDAT", b"IEND"):
            break
        pos += 12 + length
    if "colour_type" not in found:
        raise ValueError(f"{name}: a PNG without an IHDR header.")
    return found


def read_mask(path: str | os.PathLike) -> np.ndarray:
    """A segmentation mask PNG -> (H, W) uint8 class indices (255: ignore).

    Palette PNGs give their palette indices (not their colours); grey PNGs their values. A colour
    (RGB) PNG is refused: its colours name no classes. The header is checked first (size, bombs).

    Example:
    >>> mask = read_mask("tests/data/dense_folder/masks/scene_00.png")  # a palette PNG
    >>> mask.shape, sorted(np.unique(mask).tolist())
    ((48, 64), [0, 1, 2, 255])
    """
    name = os.fspath(path)
    with open(name, "rb") as f:
        data = f.read()
    info = inspect(data, verify=False)
    check(info, name)
    png = _png_chunks(data, name)
    try:
        if png["colour_type"] == 3:
            palette = png.get("palette")
            if palette is None:
                raise ValueError(f"{name}: a palette PNG without its palette (PLTE).")
            rgb = tf.io.decode_png(data, channels=3).numpy().astype(np.int32)
            return _palette_indices(rgb, palette, name)
        if png["colour_type"] in (0, 4):
            grey = tf.io.decode_png(data, channels=1, dtype=tf.uint16 if png["bit_depth"] == 16 else tf.uint8)
            grey = grey.numpy()[..., 0]
            if png["bit_depth"] < 8:
                raise ValueError(f"{name}: a {png['bit_depth']}-bit grey PNG; save masks as 8-bit grey or palette PNGs.")
            if grey.dtype == np.uint16 and grey.max(initial=0) > 255:
                raise ValueError(f"{name}: class index {int(grey.max())} in a 16-bit mask; indices go up to 254 "
                                 "(255 is ignore).")
            return grey.astype(np.uint8)
    except tf.errors.OpError as e:
        raise ValueError(f"{name} is not a PNG that can be read: {e.message.splitlines()[0]}") from None
    raise ValueError(f"{name} is a colour PNG (colour type {png['colour_type']}): its colours name no classes; save "
                     "masks as palette PNGs (Pillow's mode 'P', as PASCAL VOC's) or 8-bit grey PNGs of class indices.")


def _palette_indices(rgb: np.ndarray, palette: np.ndarray, name: str) -> np.ndarray:
    codes = (palette[:, 0].astype(np.int32) << 16) | (palette[:, 1].astype(np.int32) << 8) | palette[:, 2]
    # the first index of each colour: a palette may repeat one (unused entries are often all black)
    unique, first = np.unique(codes, return_index=True)
    pixels = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
    at = np.clip(np.searchsorted(unique, pixels), 0, len(unique) - 1)
    if not np.all(unique[at] == pixels):
        raise ValueError(f"{name}: pixels whose colour is not in its palette.")
    return first[at].astype(np.uint8)


def read_depth(path: str | os.PathLike, depth_scale: float = 0.001) -> np.ndarray:
    """A depth map -> (H, W) float32: a 16-bit (or 8-bit) grey PNG times `depth_scale`, or a `.npy` of
    (H, W) or (H, W, 1) numbers (read without unpickling; its header's size checked first).

    Example:
    >>> depth = read_depth("tests/data/depth_folder/depth/scene_00.png", depth_scale=0.001)  # millimetres
    >>> depth.dtype.name, round(float(depth.max()), 3)
    ('float32', 4.0)
    """
    name = os.fspath(path)
    if name.lower().endswith(".npy"):
        try:
            array = np.load(name, mmap_mode="r", allow_pickle=False)
        except ValueError as e:
            raise ValueError(f"{name} is not a .npy of numbers that can be read without unpickling: {e}") from None
        if array.ndim == 3 and array.shape[-1] == 1:
            array = array[..., 0]
        if array.ndim != 2 or array.dtype.kind not in "fiu":
            raise ValueError(f"{name}: a depth .npy holds (H, W) numbers, found {array.shape} {array.dtype}.")
        if array.size > max_image_pixels():
            raise ValueError(f"{name}: {array.shape} is over the limit of {max_image_pixels():,} pixels.")
        depth = np.asarray(array, np.float32)
        if not np.all(np.isfinite(depth)):
            depth = np.where(np.isfinite(depth), depth, 0.0).astype(np.float32)  # no depth where it is not finite
        return depth
    with open(name, "rb") as f:
        data = f.read()
    info = inspect(data, verify=False)
    check(info, name)
    png = _png_chunks(data, name)
    if png["colour_type"] not in (0, 4):
        raise ValueError(f"{name}: depth PNGs are grey (16-bit, times depth_scale), this one has colour type "
                         f"{png['colour_type']}.")
    try:
        grey = tf.io.decode_png(data, channels=1, dtype=tf.uint16 if png["bit_depth"] == 16 else tf.uint8)
    except tf.errors.OpError as e:
        raise ValueError(f"{name} is not a PNG that can be read: {e.message.splitlines()[0]}") from None
    return grey.numpy()[..., 0].astype(np.float32) * np.float32(depth_scale)


def read_target(path: str | os.PathLike, task: str, depth_scale: float = 0.001) -> np.ndarray:
    return read_mask(path) if task == "segmentation" else read_depth(path, depth_scale)


# --- folders ---------------------------------------------------------------------------

def _stems(folder: str, targets: bool) -> dict[str, str]:
    found: dict[str, str] = {}
    for base, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if f.startswith("."):
                continue
            path = os.path.join(base, f)
            if not targets and not is_image_name(f):
                continue
            if targets and not f.lower().endswith((".png", ".npy")):
                continue
            found.setdefault(os.path.splitext(os.path.relpath(path, folder))[0], path)
    return found


def _upright_size(info: Any) -> tuple[int, int]:
    h, w = info.height, info.width
    return (w, h) if info.orientation in (5, 6, 7, 8) else (h, w)


def _scan_pair(image: str, target: str, task: str, depth_scale: float) -> tuple[str | None, int]:
    """(the reason to leave the pair out or None, its largest class index or -1)."""
    info = inspect(image, verify=True)
    if info.problem:
        return f"image: {info.problem}", -1
    try:
        values = read_target(target, task, depth_scale)
    except (OSError, ValueError) as e:
        return f"{TARGET_FOLDERS[task][:-1] if task == 'segmentation' else 'depth'}: {e}", -1
    want = _upright_size(info)
    if values.shape != want:
        return (f"its {'mask' if task == 'segmentation' else 'depth map'} is {values.shape[1]}x{values.shape[0]} "
                f"(WxH), its image {want[1]}x{want[0]} (upright)"), -1
    top = int(values[values != IGNORE_INDEX].max(initial=0)) if task == "segmentation" else -1
    return None, top


def _read_classes(root: str) -> list[str] | None:
    path = os.path.join(root, "classes.txt")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        names = [line.strip() for line in f if line.strip()]
    if not names or len(names) > 255:
        raise ValueError(f"{path}: one class name per line, 1 to 255 of them; found {len(names)}.")
    return names


def _folder_split(root: str, where: str, task: str, strict: bool, depth_scale: float,
                  class_names: list[str] | None) -> tuple[DenseSplit, int]:
    images_dir, targets_dir = os.path.join(where, "images"), os.path.join(where, TARGET_FOLDERS[task])
    for folder in (images_dir, targets_dir):
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{where} has no {os.path.basename(folder)}/ folder: a dense data folder holds "
                                    f"images/<name>.jpg and {TARGET_FOLDERS[task]}/<name>.png"
                                    f"{' (or .npy)' if task == 'depth' else ''}.")
    images, targets = _stems(images_dir, False), _stems(targets_dir, True)
    skipped = [(os.path.relpath(images[s], root), f"no {TARGET_FOLDERS[task][:-1] if task == 'segmentation' else 'depth'} "
                f"file {TARGET_FOLDERS[task]}/{s}.png") for s in images if s not in targets]
    skipped += [(os.path.relpath(targets[s], root), "no image of that name in images/") for s in targets
                if s not in images]
    pairs = [s for s in images if s in targets]
    with ThreadPoolExecutor(max_workers=8) as pool:
        scans = list(pool.map(lambda s: _scan_pair(images[s], targets[s], task, depth_scale), pairs))
    kept, top = [], -1
    for stem, (reason, peak) in zip(pairs, scans):
        if reason is None and class_names is not None and peak >= len(class_names):
            reason = f"class index {peak} in its mask, but classes.txt names {len(class_names)} classes"
        if reason is None:
            kept.append(stem)
            top = max(top, peak)
        else:
            skipped.append((os.path.relpath(images[stem], root), reason))
    if skipped and strict:
        name, reason = skipped[0]
        raise ValueError(f"{where}: {len(skipped)} pair(s) cannot be used, e.g. {name}: {reason} (strict=True; "
                         "without it they are left out, each named).")
    for name, reason in skipped:
        log.warning("%s: left out: %s", name, reason)
    split = DenseSplit(task, [images[s] for s in kept], [targets[s] for s in kept], class_names,
                       [os.path.relpath(images[s], root) for s in kept], where, skipped, depth_scale)
    return split, top


def load_dense_folder(root: str | os.PathLike, task: str = "segmentation", *, strict: bool = False,
                      depth_scale: float = 0.001, test_fraction: float = 0.1, seed: int = 0) -> dict[str, DenseSplit]:
    """{"train": ..., "test": ..., ["val": ...]} DenseSplits of a folder of image/target pairs.

    `FOLDER/{train,val,test}/images|masks` gives its own splits; a flat `FOLDER/images|masks` is split
    here (seeded): `test_fraction` of the pairs held out as "test". Class names come from
    `FOLDER/classes.txt`, else "class_0" .. up to the largest index any mask holds.

    Example:
    >>> splits = load_dense_folder("tests/data/dense_folder", test_fraction=0.25)
    >>> len(splits["train"]), len(splits["test"]), splits["train"].class_names
    (10, 3, ['background', 'disc', 'square'])
    >>> sorted(name for name, reason in splits["train"].skipped)  # each named, with its reason
    ['images/broken.jpg', 'images/odd.png', 'masks/lonely.png']
    """
    root = os.fspath(root)
    if task not in TASKS:
        raise ValueError(f"task {task!r}: use one of {TASKS}.")
    if not os.path.isdir(root):
        raise FileNotFoundError(f"dense data folder {root} does not exist.")
    class_names = _read_classes(root) if task == "segmentation" else None
    present = [s for s in SPLIT_NAMES if os.path.isdir(os.path.join(root, s, "images"))]
    splits, top = {}, -1
    if present:
        for s in present:
            splits[s], peak = _folder_split(root, os.path.join(root, s), task, strict, depth_scale, class_names)
            top = max(top, peak)
    else:
        whole, top = _folder_split(root, root, task, strict, depth_scale, class_names)
        order = np.random.default_rng(seed).permutation(len(whole))
        held = int(round(len(whole) * test_fraction)) if len(whole) > 1 else 0
        held = min(max(held, 1 if test_fraction > 0 and len(whole) > 1 else 0), len(whole) - 1)
        splits["test"], splits["train"] = whole.subset(sorted(order[:held])), whole.subset(sorted(order[held:]))
        splits["train"].skipped = whole.skipped
    if task == "segmentation" and class_names is None:
        names = [f"class_{i}" for i in range(max(top, 0) + 1)]
        for split in splits.values():
            split.class_names = names
    for name, split in splits.items():
        if len(split) == 0:
            raise ValueError(f"{root}: the {name} split has no usable image/{'mask' if task == 'segmentation' else 'depth'} pair"
                             f"{'; left out: ' + '; '.join(f'{n}: {r}' for n, r in split.skipped[:3]) if split.skipped else ''}.")
    return splits


# --- the pipeline ---------------------------------------------------------------------

def _load_pair(split: DenseSplit):
    images, targets, task, scale = split.images, split.targets, split.task, split.depth_scale
    dtype = np.uint8 if task == "segmentation" else np.float32

    def load(i):
        i = int(i)
        return read_image(images[i]), read_target(targets[i], task, scale).astype(dtype)

    def graph(i):
        image, target = tf.numpy_function(load, [i], (tf.uint8, tf.as_dtype(dtype)), stateful=False)
        image.set_shape((None, None, 3))
        target.set_shape((None, None))
        return image, target

    return graph


def _resize_pair(image, target, size, task):
    image = tf.image.resize(tf.cast(image, tf.float32), size, method="bilinear", antialias=True)
    target = tf.image.resize(target[..., None], size, method="nearest")[..., 0]
    return image, target


def _scale_crop(image, target, size, min_scale, max_scale, fill, seed):
    """Resized by a random factor of the size that covers `size`, padded (image 0, target `fill`) where
    smaller, then one random crop of `size` from both."""
    h, w = tf.cast(tf.shape(image)[0], tf.float32), tf.cast(tf.shape(image)[1], tf.float32)
    cover = tf.maximum(size[0] / h, size[1] / w)
    factor = cover * tf.random.uniform((), min_scale, max_scale, seed=seed)
    new = tf.cast(tf.maximum(tf.round(tf.stack([h, w]) * factor), 1.0), tf.int32)
    image = tf.image.resize(tf.cast(image, tf.float32), new, method="bilinear", antialias=True)
    target = tf.image.resize(target[..., None], new, method="nearest")[..., 0]
    pad_h, pad_w = tf.maximum(size[0] - new[0], 0), tf.maximum(size[1] - new[1], 0)
    image = tf.pad(image, [[0, pad_h], [0, pad_w], [0, 0]])
    target = tf.pad(target, [[0, pad_h], [0, pad_w]], constant_values=fill)
    shape = tf.shape(target)
    top = tf.random.uniform((), 0, shape[0] - size[0] + 1, tf.int32)
    left = tf.random.uniform((), 0, shape[1] - size[1] + 1, tf.int32)
    return (image[top:top + size[0], left:left + size[1]], target[top:top + size[0], left:left + size[1]])


def make_dense_dataset(split: DenseSplit, image_size: int | Sequence[int], batch_size: int, *, training: bool,
                       flip: bool = True, min_scale: float = 0.5, max_scale: float = 2.0, seed: int = 0,
                       repeat: bool = False, pixel_mean: Sequence[float] = OFFICIAL_STATS,
                       pixel_std: Sequence[float] = OFFICIAL_STATS, drop_remainder: bool | None = None,
                       scaled: bool = True) -> tf.data.Dataset:
    """A batched tf.data pipeline of (model inputs (B, H, W, 3) float32, targets (B, H, W)).

    Training: shuffled (seeded), each pair resized by one random factor in [min_scale, max_scale] of
    the size that covers `image_size` (image bilinear, target nearest, so no class is blended), one random
    crop of `image_size` from both (padding with "ignore" / "no depth" where the scaled pair is
    smaller), one flip for both. Evaluation: both resized to `image_size` (target nearest). Targets are
    int32 class indices (255 ignored) or float32 depth (0: none). `scaled=False` gives the pixels
    (float32 0-255) instead of the model's inputs, for pictures. Files are decoded in parallel; a pair
    that fails to decode after its scan passed is dropped with its error in the log.

    Example:
    >>> train = load_dense_folder("tests/data/dense_folder")["train"]
    >>> images, masks = next(iter(make_dense_dataset(train, (32, 32), batch_size=2, training=True)))
    >>> tuple(images.shape), tuple(masks.shape), str(masks.dtype.name)
    ((2, 32, 32, 3), (2, 32, 32), 'int32')
    """
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(int(s) for s in image_size)
    if len(split) == 0:
        raise ValueError(f"{split.origin}: no image/target pairs; refusing to train or evaluate on zero examples.")
    if not 0 < min_scale <= max_scale:
        raise ValueError(f"min_scale {min_scale} and max_scale {max_scale}: 0 < min_scale <= max_scale.")
    fill = IGNORE_INDEX if split.task == "segmentation" else 0
    if split.in_memory:
        ds = tf.data.Dataset.from_tensor_slices((split.images, split.targets))
        if training:
            ds = ds.shuffle(len(split), seed=seed, reshuffle_each_iteration=True)
    else:
        ds = tf.data.Dataset.range(len(split))
        if training:
            ds = ds.shuffle(len(split), seed=seed, reshuffle_each_iteration=True)
        ds = ds.map(_load_pair(split), num_parallel_calls=AUTOTUNE).ignore_errors(log_warning=True)
    if training and repeat:
        ds = ds.repeat()
    target_dtype = tf.int32 if split.task == "segmentation" else tf.float32

    def prepare(image, target):
        target = tf.cast(target, target_dtype)
        if training:
            image, target = _scale_crop(image, target, size, min_scale, max_scale, fill, None)
            if flip:
                flipped = tf.random.uniform(()) < 0.5
                image = tf.cond(flipped, lambda: tf.reverse(image, [1]), lambda: image)
                target = tf.cond(flipped, lambda: tf.reverse(target, [1]), lambda: target)
        else:
            image, target = _resize_pair(image, target, size, split.task)
        image = tf.clip_by_value(image, 0, 255)
        if scaled:
            image = to_model_range(image, pixel_mean, pixel_std)
        return tf.ensure_shape(image, size + (3,)), tf.ensure_shape(target, size)

    ds = ds.map(prepare, num_parallel_calls=AUTOTUNE)
    ds = ds.batch(batch_size, drop_remainder=training if drop_remainder is None else drop_remainder)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options).prefetch(AUTOTUNE)

