"""tf.data input pipelines: sources (arrays, image folders, .tgz archives, tfds), the
official preprocessing (pixels to [-1, 1]), augmentation and batching.

A source gives uint8 RGB images and integer labels with class names; `make_dataset`
turns a split into a batched `tf.data.Dataset` of (images in [-1, 1], one-hot labels).
Datasets sorted by class are always shuffled with a fixed seed before any slicing, so
no split or subset is biased towards the first classes.

`data_source` is the one reading of a data spec ("digits", "tfds:NAME", a folder, an
archive) for training and export alike; `load_image_set` reads the sample and calibration
images of an export from any of those, or from files, arrays and datasets.
"""

import logging
import os
import socket
import tarfile

import numpy as np
import tensorflow as tf

# one definition each, shared with predict and export
from keras_vit._optional import require
from keras_vit.applications import IMAGE_EXTENSIONS, load_image, resize_images, scale_pixels, to_pixels, to_rgb
from keras_vit.augment import check_rand_augment, rand_augment

log = logging.getLogger("keras_vit")


ARCHIVE_EXTENSIONS = (".tgz", ".tar", ".tar.gz", ".gz")
AUTOTUNE = tf.data.AUTOTUNE


class Split:
    """One split of a dataset: uint8 RGB images and int labels, with the class names.

    Held in memory (`images` (N, H, W, 3), `labels` (N,)) for datasets that fit, or
    streamed (`stream`: a tf.data.Dataset of (image, label) with `num_examples` known)
    for large ones such as ImageNet from tfds.
    """

    def __init__(self, images, labels, class_names, origin, stream=None, num_examples=None):
        self.images = images
        self.labels = labels
        self.class_names = list(class_names)
        self.origin = origin
        self.stream = stream
        self.num_examples = len(labels) if stream is None else int(num_examples)

    def __len__(self):
        return self.num_examples

    def elements(self):
        """A tf.data.Dataset of (uint8 image, int label)."""
        if self.stream is not None:
            return self.stream
        return tf.data.Dataset.from_tensor_slices((self.images, self.labels))

    def __repr__(self):
        shape = "streamed" if self.stream is not None else f"{self.images.shape[1:]}"
        return f"Split({self.origin}: {len(self)} images {shape}, {len(self.class_names)} classes)"


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


def from_arrays(images, labels, class_names=None, origin="arrays"):
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
    images = _as_rgb_uint8(images, origin)
    if len(images) != len(labels):
        raise ValueError(f"{origin}: {len(images)} images but {len(labels)} labels.")
    if len(images) == 0:
        raise ValueError(f"{origin}: no images; refusing to train or evaluate on zero examples.")
    if class_names is None:
        class_names = [str(i) for i in range(int(labels.max()) + 1)]
    if labels.min() < 0 or labels.max() >= len(class_names):
        raise ValueError(f"{origin}: labels must lie in [0, {len(class_names) - 1}], found [{labels.min()}, {labels.max()}].")
    return Split(images, labels, class_names, origin)


def stratified_split(split, fraction, seed=0, names=("train", "validation")):
    """Splits off `fraction` of every class (shuffled with `seed`); returns (rest, held_out)."""
    if split.stream is not None:
        raise ValueError(f"{split.origin} is streamed; split it with the source's own slicing "
                         "(for tfds: validation_split does this).")
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"split fraction must be in (0, 1), got {fraction}.")
    rng = np.random.default_rng(seed)
    held = []
    for c in np.unique(split.labels):
        idx = np.flatnonzero(split.labels == c)
        rng.shuffle(idx)
        held.extend(idx[: max(1, int(round(len(idx) * fraction)))])
    mask = np.zeros(len(split), bool)
    mask[held] = True
    rest_idx, held_idx = np.flatnonzero(~mask), np.flatnonzero(mask)
    rng.shuffle(rest_idx)
    rng.shuffle(held_idx)

    def take(idx, name):
        return Split(split.images[idx], split.labels[idx], split.class_names, f"{split.origin} [{name}]")

    return take(rest_idx, names[0]), take(held_idx, names[1])


def load_digits(seed=0, test_fraction=0.2):
    """scikit-learn's 1,797 8x8 digits as RGB uint8, split stratified 80/20 with a fixed seed.

    Needs scikit-learn: pip install "keras-vit[digits]".
    """
    datasets = require("sklearn.datasets", "digits", package="scikit-learn", what="the digits data set")
    digits = datasets.load_digits()
    images = digits.images * (255.0 / 16.0)  # 0..16 grey levels -> 0..255
    split = from_arrays(images, digits.target, [str(d) for d in range(10)], origin="sklearn digits")
    train, test = stratified_split(split, test_fraction, seed=seed, names=("train", "test"))
    return {"train": train, "test": test}


def _decode_all(items, origin):
    """Decodes encoded images [(name, bytes)] in parallel into one uint8 array, checking sizes."""
    names = [n for n, _ in items]
    ds = tf.data.Dataset.from_tensor_slices([b for _, b in items])
    ds = ds.map(lambda b: tf.io.decode_image(b, channels=3, expand_animations=False), num_parallel_calls=AUTOTUNE)
    images = []
    try:
        for i, image in enumerate(ds.as_numpy_iterator()):
            if images and image.shape != images[0].shape:
                raise ValueError(
                    f"{origin}: images of mixed sizes: {names[0]} is {images[0].shape[1]}x{images[0].shape[0]}, "
                    f"{names[i]} is {image.shape[1]}x{image.shape[0]}. Resize the dataset to one size."
                )
            images.append(image)
    except tf.errors.InvalidArgumentError:
        for name, data in items:  # find the culprit; only on the error path
            try:
                tf.io.decode_image(data, channels=3, expand_animations=False)
            except tf.errors.InvalidArgumentError:
                raise ValueError(f"{name} is not a readable image ({', '.join(IMAGE_EXTENSIONS)}).") from None
        raise
    return np.stack(images)


def _class_folders(split_dir):
    try:
        classes = sorted(e.name for e in os.scandir(split_dir) if e.is_dir())
    except OSError as e:
        raise ValueError(f"Cannot read the data folder {split_dir}: {e.strerror}.") from None
    if not classes:
        raise ValueError(f"{split_dir} has no class folders; expected {split_dir}/<class>/<image files>.")
    return classes


def load_image_folder(root, splits=("train", "test")):
    """Reads `root/<split>/<class>/*.jpg|png` into memory; class names are the folder names.

    Images of one dataset must share one size (a mix is reported with two example files);
    a class folder without images, an empty or unreadable folder raise a ValueError naming
    the path.
    """
    return _decode_splits(_folder_items(root, splits))


def _folder_items(root, splits):
    """{split: (class names, [(path, path)], labels, origin)}: the files of each split, not yet read."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise ValueError(f"Data folder {root} does not exist or is not a folder.")
    out, class_names = {}, None
    for split in splits:
        split_dir = os.path.join(root, split)
        if not os.path.isdir(split_dir):
            raise ValueError(f"Data folder {root} has no '{split}' folder; expected {root}/{split}/<class>/<images>.")
        classes = _class_folders(split_dir)
        if class_names is not None and classes != class_names:
            raise ValueError(f"{split_dir} has classes {classes}, but {root}/{splits[0]} has {class_names}.")
        class_names = classes
        items, labels = [], []
        for label, name in enumerate(classes):
            folder = os.path.join(split_dir, name)
            files = sorted(f for f in os.listdir(folder) if f.lower().endswith(IMAGE_EXTENSIONS))
            if not files:
                raise ValueError(f"Class folder {folder} has no images ({', '.join(IMAGE_EXTENSIONS)}).")
            items.extend((os.path.join(folder, f),) * 2 for f in files)
            labels.extend([label] * len(files))
        out[split] = (classes, items, labels, split_dir)
    return out


def load_image_archive(path, splits=("train", "test")):
    """Reads a .tar/.tgz holding `[top/]<split>/<class>/*.jpg` (the layout of cifar10-jpeg.tgz)."""
    return _decode_splits(_archive_items(path, splits))


def _archive_items(path, splits):
    """{split: (class names, [(name, bytes)], labels, origin)}: the encoded images of each split."""
    path = os.fspath(path)
    members = {split: {} for split in splits}
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                if not member.isfile() or not member.name.lower().endswith(IMAGE_EXTENSIONS):
                    continue
                parts = member.name.strip("./").split("/")
                if len(parts) < 3 or parts[-3] not in members:
                    continue
                split, cls = parts[-3], parts[-2]
                members[split].setdefault(cls, []).append((f"{path}:{member.name}", archive.extractfile(member).read()))
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ValueError(f"Cannot read the image archive {path}: {e}.") from None
    out, class_names = {}, None
    for split in splits:
        classes = sorted(members[split])
        if not classes:
            raise ValueError(f"{path} has no images under {split}/<class>/; expected [top/]{split}/<class>/<images>.")
        if class_names is not None and classes != class_names:
            raise ValueError(f"{path}: {split} has classes {classes}, but {splits[0]} has {class_names}.")
        class_names = classes
        items, labels = [], []
        for label, cls in enumerate(classes):
            for item in sorted(members[split][cls]):
                items.append(item)
                labels.append(label)
        out[split] = (classes, items, labels, f"{path}:{split}")
    return out


def _decode_splits(listed, max_images=None, rng=None):
    """Decodes what `_folder_items`/`_archive_items` listed into Splits; with `max_images`, only a
    random `max_images` of a larger split (`_pick`'s, as if all were decoded and then sampled)."""
    out = {}
    for split, (classes, items, labels, origin) in listed.items():
        labels = np.asarray(labels, dtype=np.int64)
        keep = _pick(len(items), max_images, rng)
        items, labels = [(items[i][0], _read(items[i][1])) for i in keep], labels[keep]
        log.info("decoding %d images of %s", len(items), origin)
        out[split] = from_arrays(_decode_all(items, origin), labels, classes, origin=origin)
    return out


def _read(data):
    """An item's bytes: archives hold them, folders list their paths."""
    if isinstance(data, bytes):
        return data
    with open(data, "rb") as fh:
        return fh.read()


# How `keras-vit train` takes a folder of images in place of a tfds data set.
TRAIN_LOCAL_DATA = "--set data=FOLDER"
IN_MEMORY_LIMIT = 2 * 1024**3  # bytes of decoded images; larger tfds datasets are streamed


def load_tfds(name, splits=("train", "test"), data_dir=None, *, local_data=TRAIN_LOCAL_DATA):
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


def data_source(spec):
    """The one reading of a data spec: what it names, as (kind, value).

    "digits" -> ("digits", None); "tfds:NAME" or a bare name that is no path -> ("tfds",
    NAME); an existing folder -> ("folder", path); an existing file (a .tar/.tgz) ->
    ("archive", path). A path that does not exist (it has a separator or an archive's
    extension) is a ValueError naming it.

    Example:
    >>> data_source("tfds:cifar10")
    ('tfds', 'cifar10')
    """
    spec = os.fspath(spec)
    if spec == "digits":
        return "digits", None
    if spec.startswith("tfds:"):
        return "tfds", spec[len("tfds:"):]
    if os.path.isdir(spec):
        return "folder", spec
    if os.path.isfile(spec):
        return "archive", spec
    if os.sep in spec or spec.endswith(ARCHIVE_EXTENSIONS):
        raise ValueError(f"Data path {spec} does not exist: give an existing folder of train/<class>/ and "
                         "test/<class>/ images, an archive (.tgz) of one, digits (scikit-learn's, installed with "
                         "keras-vit[digits]) or tfds:NAME.")
    return "tfds", spec


def load_data(spec, splits=("train", "test"), *, local_data=TRAIN_LOCAL_DATA):
    """Resolves a data spec (see `data_source`): "digits", "tfds:NAME", a folder, a .tar/.tgz, or a tfds name.

    `local_data`: how the caller takes a folder instead of tfds, named when tfds is offline."""
    kind, value = data_source(spec)
    if kind == "digits":
        return load_digits()
    if kind == "folder":
        return load_image_folder(value, splits)
    if kind == "archive":
        return load_image_archive(value, splits)
    return load_tfds(value, splits, local_data=local_data)


# --- preprocessing and augmentation, in the graph -------------------------------------

def to_model_range(images):
    """uint8 [0, 255] -> float32 [-1, 1], as keras_vit.preprocess_input."""
    return scale_pixels(tf.cast(images, tf.float32))


def inception_crop(image, size, min_area=0.05, seed=None):
    """Random crop covering min_area-100% of the image, aspect 3/4-4/3, resized to `size`."""
    begin, crop_size, _ = tf.image.sample_distorted_bounding_box(
        tf.shape(image), tf.zeros((0, 0, 4), tf.float32), min_object_covered=0.0,
        aspect_ratio_range=(3 / 4, 4 / 3), area_range=(min_area, 1.0), max_attempts=10,
        use_image_if_no_bounding_boxes=True, seed=seed or 0)
    crop = tf.slice(image, begin, crop_size)
    return tf.image.resize(crop, size, method="bilinear", antialias=True)


def pad_crop(image, size, pad):
    """Pads by `pad` pixels (reflect) and takes a random crop of `size`: the CIFAR standard."""
    image = tf.image.resize(image, size) if image.shape[:2] != tuple(size) else tf.cast(image, tf.float32)
    image = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]], mode="REFLECT")
    return tf.image.random_crop(image, tuple(size) + (3,))


def center_resize(image, size, crop_fraction=1.0):
    """Evaluation: central crop of `crop_fraction` of the shorter side, resized to `size`."""
    image = tf.cast(image, tf.float32)
    if crop_fraction < 1.0:
        shape = tf.shape(image)
        side = tf.cast(tf.cast(tf.minimum(shape[0], shape[1]), tf.float32) * crop_fraction, tf.int32)
        image = tf.image.crop_to_bounding_box(image, (shape[0] - side) // 2, (shape[1] - side) // 2, side, side)
    if image.shape[:2] == tuple(size):
        return image
    return tf.image.resize(image, size, method="bilinear", antialias=True)


def make_dataset(split, image_size, batch_size, *, training, num_classes=None, crop="pad", min_area=0.05,
                 pad=4, flip=True, randaugment=None, mixup=0.0, cutmix=0.0, crop_fraction=1.0, seed=0,
                 repeat=False, drop_remainder=None):
    """A batched tf.data pipeline of (images in [-1, 1], one-hot float labels) from a Split.

    Training: shuffle (seeded), crop ("inception": area `min_area`-100%; "pad": reflect-pad
    and random crop; "none": resize), horizontal flips, optional RandAugment (num_ops,
    magnitude on the paper's 0-10 scale: keras_vit.augment), then MixUp / CutMix on batches (alpha > 0 enables,
    one of them per batch when both are set). Evaluation: central crop and resize.
    """
    size = tuple(image_size) if not isinstance(image_size, int) else (image_size, image_size)
    num_classes = num_classes or len(split.class_names)
    if len(split) == 0:
        raise ValueError(f"{split.origin}: no images; refusing to train or evaluate on zero examples.")
    ds = split.elements()
    if training:
        ds = ds.shuffle(min(len(split), 50_000 if split.stream is None else 10_000), seed=seed,
                        reshuffle_each_iteration=True)
        if repeat:
            ds = ds.repeat()
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
            return to_model_range(tf.clip_by_value(image, 0, 255)), tf.one_hot(label, num_classes)

        ds = ds.map(augment, num_parallel_calls=AUTOTUNE)
        ds = ds.batch(batch_size, drop_remainder=True if drop_remainder is None else drop_remainder)
        if mixup or cutmix:
            ds = ds.map(_batch_mixer(mixup, cutmix, seed), num_parallel_calls=AUTOTUNE)
    else:
        ds = ds.map(lambda im, lb: (to_model_range(center_resize(im, size, crop_fraction)), tf.one_hot(lb, num_classes)),
                    num_parallel_calls=AUTOTUNE)
        ds = ds.batch(batch_size, drop_remainder=bool(drop_remainder))
    options = tf.data.Options()
    # The in-memory tensors can be split by element across workers.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options).prefetch(AUTOTUNE)


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


def _data_split(spec, split, what, max_images=None, rng=None):
    """A split of a keras_vit.data source: an archive (.tgz/.tar), `root/<split>/<class>/` folders,
    "digits" or "tfds:NAME". With `max_images`, a folder or an archive decodes only the random
    `max_images` that `load_image_set` keeps (200 calibration images need not decode 50,000)."""
    log.info("reading the %s split of %s for the %s", split, spec, what)
    try:
        kind, value = data_source(spec)
        if max_images and kind in ("folder", "archive"):
            listed = (_folder_items if kind == "folder" else _archive_items)(value, (split,))
            splits = _decode_splits(listed, max_images, rng)
        else:
            splits = load_data(spec, (split,))
    except (ValueError, OSError) as e:
        raise ValueError(f"{what}: cannot read the {split} split of {spec}: {e}") from None
    if split not in splits:
        raise ValueError(f"{what}: {spec} has no {split!r} split (it has {', '.join(splits)}).")
    return splits[split]


def _is_data_spec(path, split):
    """Whether `path` is a data source of keras_vit.data (as `data_source` reads it) rather than
    images: a folder is one when it has a `split` subfolder; only "tfds:NAME" names a tfds set."""
    try:
        kind, _ = data_source(path)
    except ValueError:
        return False
    if kind == "folder":
        return os.path.isdir(os.path.join(path, split))
    if kind == "archive":
        return path.lower().endswith(ARCHIVE_EXTENSIONS)
    return kind == "digits" or path.startswith("tfds:")


def load_image_set(source, image_size, *, class_names=None, classes=None, labelled=True, split="test",
                   max_images=None, seed=0, what="images"):
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
        source = _data_split(os.fspath(source), split, what, max_images, rng)
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
    "Split", "from_arrays", "stratified_split", "load_digits", "load_image_folder", "load_image_archive",
    "load_tfds", "data_source", "load_data", "load_image_set", "make_dataset", "to_model_range", "inception_crop",
    "pad_crop", "center_resize",
]
