"""Real photographs for the precision comparisons (no downloads).

scikit-image's chelsea, coffee and astronaut, matplotlib's grace_hopper.jpg, and CIFAR-10
test JPEGs from the shared archive when it is there (../shared/data/cifar10-jpeg.tgz beside
the repository, or $KERAS_VIT_CIFAR_TGZ), each resized to the model's input and scaled to [-1, 1].
"""

import io
import os
import tarfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CIFAR_TGZ = os.environ.get("KERAS_VIT_CIFAR_TGZ",
                           os.path.join(os.path.dirname(ROOT), "shared", "data", "cifar10-jpeg.tgz"))
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def photos():
    """[(name, uint8 HxWx3)] of the sample photographs that are installed."""
    out = []
    try:
        import skimage.data

        out += [(n, getattr(skimage.data, n)()) for n in ("chelsea", "coffee", "astronaut")]
    except ImportError:
        pass
    try:
        import matplotlib.cbook
        from PIL import Image

        with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
            out.append(("grace_hopper", np.asarray(Image.open(f).convert("RGB"))))
    except (ImportError, OSError, ValueError):
        pass
    return out


def cifar_test(limit=200, path=CIFAR_TGZ):
    """(uint8 (N, 32, 32, 3), labels) of the first `limit` test JPEGs per class order, or None."""
    if not os.path.exists(path):
        return None
    from PIL import Image

    per_class = max(1, limit // len(CIFAR_CLASSES))
    images, labels, counts = [], [], {c: 0 for c in CIFAR_CLASSES}
    with tarfile.open(path) as tar:
        for member in tar:
            parts = member.name.split("/")
            if len(parts) != 3 or parts[0] != "test" or parts[1] not in counts or counts[parts[1]] >= per_class:
                continue
            data = tar.extractfile(member).read()
            images.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
            labels.append(CIFAR_CLASSES.index(parts[1]))
            counts[parts[1]] += 1
            if sum(counts.values()) >= per_class * len(CIFAR_CLASSES):
                break
    return np.stack(images), np.array(labels)


def to_input(images, size):
    """uint8 images (list or array) -> float32 (N, size, size, 3) in [-1, 1], bilinear resize."""
    import tensorflow as tf

    out = [tf.image.resize(np.asarray(im, "float32"), (size, size), method="bilinear").numpy() for im in images]
    return np.stack(out) / 127.5 - 1.0
