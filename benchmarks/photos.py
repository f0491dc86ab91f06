"""Photo folders, streamed: peak memory against the number of images, and the input pipeline's
speed against the model's.

    python benchmarks/photos.py memory --images 2000 50000
    python benchmarks/photos.py throughput --recipes cifar10 cifar10_hybrid

memory: writes FOLDER/<class>/*.jpg of N generated photos (10 classes; each side 48-320 px, so no
two sizes need agree; one in 16 EXIF-rotated), then runs `keras-vit train` on it in a fresh
process: a tiny ViT at 64 px, batch 32, 2 epochs of 40 steps, 2% of every class held out as test
and 2% as validation, every split evaluated. The child's peak RSS (ru_maxrss) is the figure; the
folders of different sizes differ only in how many files the split lists and the shuffle buffer
holds (their paths: some megabytes at 50,000), never in pixels held.

throughput: for each recipe, the input pipeline alone (`keras_vit.data.make_dataset` as `keras-vit
train` builds it: augmentation, RandAugment, batching) in images/s, once on
../shared/data/cifar10-jpeg.tgz as the shipped recipes train (decoded into memory once) and once on
the same 50,000 JPEGs as a folder (streamed: read and decoded every epoch), against the recipe's
training step (benchmarks/recipe_cost.py's: the model as `keras-vit train` compiles it) in images/s.
The pipeline keeps up when its images/s exceeds the step's; both share the same cores in a run,
so the pipeline's share of a run is roughly step images/s / pipeline images/s.

Prints one JSON line per measurement; nothing here is a pass/fail test.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_TGZ = os.path.join(os.path.dirname(ROOT), "shared", "data", "cifar10-jpeg.tgz")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def write_photos(folder, count, classes=10, seed=0):
    """`count` JPEGs of random sizes in folder/<class>/, each a smooth random picture (cheap to encode),
    one in 16 carrying an EXIF orientation of 6 (turned 90 degrees). Pillow writes them (a few ms each;
    TensorFlow's eager encoder took 100 ms), else TensorFlow."""
    import io

    import numpy as np

    try:
        from PIL import Image
    except ImportError:
        Image = None
    rng = np.random.default_rng(seed)
    exif = _exif_app1(6)
    for i in range(count):
        cls = f"class_{i % classes}"
        os.makedirs(os.path.join(folder, cls), exist_ok=True)
        h, w = (int(v) for v in rng.integers(48, 321, 2))
        base = rng.integers(0, 256, (4, 4, 3)).astype("uint8")
        if Image is not None:
            buffer = io.BytesIO()
            Image.fromarray(base).resize((w, h), Image.BILINEAR).save(buffer, "JPEG", quality=85)
            data = buffer.getvalue()
        else:
            import tensorflow as tf

            image = tf.image.resize(base[None].astype("float32"), (h, w), method="bilinear")[0]
            data = tf.io.encode_jpeg(tf.cast(image, tf.uint8), quality=85).numpy()
        if i % 16 == 0:
            data = data[:2] + exif + data[2:]
        with open(os.path.join(folder, cls, f"{i:06d}.jpg"), "wb") as f:
            f.write(data)


def _exif_app1(orientation):
    """An APP1 Exif segment holding only IFD0's Orientation tag (little-endian TIFF)."""
    import struct

    tiff = b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", 1) + struct.pack("<HHIHH", 0x0112, 3, 1, orientation, 0)
    tiff += struct.pack("<I", 0)
    body = b"Exif\0\0" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body


def memory(counts, keep):
    from keras_vit import __version__

    results = []
    work = tempfile.mkdtemp(prefix="keras_vit_photos_")
    try:
        for count in counts:
            folder = os.path.join(work, f"photos_{count}")
            start = time.time()
            write_photos(folder, count)
            written = time.time() - start
            tiny = os.path.join(work, "tiny.py")
            with open(tiny, "w") as f:
                f.write(TINY_RECIPE)
            command = [sys.executable, os.path.abspath(__file__), "child-train", tiny, folder,
                       os.path.join(work, f"run_{count}")]
            start = time.time()
            out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            if out.returncode:
                sys.stderr.write(out.stderr[-4000:])
                raise RuntimeError(f"training on {count} images failed")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            result.update(images=count, folder_write_s=round(written, 1), run_s=round(time.time() - start, 1),
                          keras_vit=__version__)
            print(json.dumps(result), flush=True)
            results.append(result)
            if not keep:
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return results


TINY_RECIPE = '''
def get_config():
    return dict(image_size=64, model=dict(patch_size=8, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128),
                crop="inception", batch_size=32, epochs=2, steps_per_epoch=40, warmup_steps=10,
                validation_split=0.02, test_fraction=0.02, precision="float32", seed=0)
'''


def child_train(recipe, folder, model_dir):
    from keras_vit import training

    config = training.apply_overrides(training.load_recipe(recipe), [f"data={folder}"])
    metrics = training.train(config, model_dir, verbose=0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"peak_rss_mib": round(peak / 2**20, 1), "train_images": metrics["train_examples"],
                      "test_images": metrics["test_examples"], "validation_images": metrics["validation_examples"],
                      "skipped": metrics["skipped_files"], "train_seconds": metrics["train_seconds"]}))


def pipeline_rate(split, config, batches, warmup=3):
    """Images/s of the recipe's training pipeline over `batches` batches (after `warmup`)."""
    from keras_vit import data

    aug = dict(crop=config["crop"], min_area=config["min_area"], pad=config["pad"], flip=config["flip"],
               randaugment=config["randaugment"], mixup=config["mixup"], cutmix=config["cutmix"])
    ds = data.make_dataset(split, config["image_size"], config["batch_size"], training=True, seed=0, repeat=True,
                           **aug)
    it = iter(ds)
    for _ in range(warmup):
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * config["batch_size"] / (time.perf_counter() - start)


def throughput(recipes, batches, steps, tgz):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import recipe_cost

    from keras_vit import data, training

    if not os.path.isfile(tgz):
        raise SystemExit(f"needs {tgz} (the project's shared CIFAR-10 archive)")
    work = tempfile.mkdtemp(prefix="keras_vit_cifar_folder_")
    try:
        with tarfile.open(tgz) as archive:
            archive.extractall(work, filter="data")
        top = next(os.path.join(work, d) for d in os.listdir(work) if os.path.isdir(os.path.join(work, d)))
        start = time.time()
        in_memory = data.load_data(tgz, ("train",))["train"]
        memory_load_s = time.time() - start
        start = time.time()
        streamed = data.load_data(top, ("train",))["train"]
        listing_s = time.time() - start
        results = []
        for recipe in recipes:
            config = training.load_recipe(recipe)
            entry = recipe_cost.build_entry(recipe, None)
            for _ in range(2):
                recipe_cost.step(entry)
            entry["wall"].clear()
            for _ in range(steps):
                recipe_cost.step(entry)
            step_s = sorted(entry["wall"])[len(entry["wall"]) // 2]
            row = {"recipe": entry["recipe"], "precision": entry["precision"], "batch": config["batch_size"],
                   "model_images_per_s": round(config["batch_size"] / step_s, 1),
                   "pipeline_in_memory_images_per_s": round(pipeline_rate(in_memory, config, batches), 1),
                   "pipeline_folder_images_per_s": round(pipeline_rate(streamed, config, batches), 1),
                   "tgz_decode_once_s": round(memory_load_s, 1), "folder_listing_and_header_scan_s": round(listing_s, 1),
                   "machine": recipe_cost.machine()}
            print(json.dumps(row), flush=True)
            results.append(row)
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="part", required=True)
    m = sub.add_parser("memory", help="peak RSS of keras-vit train on generated photo folders")
    m.add_argument("--images", type=int, nargs="+", default=[2000, 50000])
    m.add_argument("--keep", action="store_true", help="keep the generated folders and runs")
    t = sub.add_parser("throughput", help="input pipeline images/s against the training step's")
    t.add_argument("--recipes", nargs="+", default=["cifar10", "cifar10_hybrid"])
    t.add_argument("--batches", type=int, default=40, help="timed pipeline batches per source")
    t.add_argument("--steps", type=int, default=8, help="timed training steps per recipe (median)")
    t.add_argument("--tgz", default=SHARED_TGZ)
    c = sub.add_parser("child-train")
    c.add_argument("recipe")
    c.add_argument("folder")
    c.add_argument("model_dir")
    args = p.parse_args(argv)
    if args.part == "memory":
        return memory(args.images, args.keep)
    if args.part == "throughput":
        return throughput(args.recipes, args.batches, args.steps, args.tgz)
    return child_train(args.recipe, args.folder, args.model_dir)


if __name__ == "__main__":
    main()
