"""The zoo fixtures (tests/data/zoo) are what cases.json says they are: every listed file there, every
array of the listed shape and dtype, the checkpoints' configs and safetensors headers agreeing with the
entry, the images the normalized pixels, and the huggingface_hub cache laid out as huggingface_hub lays
it out. Nothing here loads a checkpoint into keras-vit: the loaders come with issue 37."""

import hashlib
import json
import os
import re
import struct

import numpy as np
import pytest
from conftest import DATA, SHARED

ZOO = DATA / "zoo"
CASES = json.loads((ZOO / "cases.json").read_text())
NAMES = sorted(CASES["cases"])


def safetensors_header(path):
    """{name: (dtype, shape)} from a .safetensors file's JSON header, without reading the tensors."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"]) for k, v in header.items()}


def test_every_recorded_sensitivity_is_visible_at_the_tolerance():
    """cases.json "sensitivity": how far each feature moves the library's outputs when left out; a test of
    keras-vit at the tolerance can only tell a feature is there when that exceeds the tolerance."""
    seen = {(name, label): value for name, case in CASES["cases"].items()
            for label, value in case.get("sensitivity", {}).items()}
    assert len(seen) >= 30
    small = {k: v for k, v in seen.items() if v <= CASES["tolerance"] and "eps" not in k[1]}
    assert not small, small


def test_every_origin_is_listed_and_every_case_has_one():
    listed = [name for names in CASES["origins"].values() for name in names]
    assert sorted(listed) == NAMES and len(set(listed)) == len(listed)
    assert CASES["versions"] == {"torch": "2.14.1+cu130", "timm": "1.0.31", "transformers": "5.24.0"}
    assert CASES["tolerance"] == 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_files_exist_and_arrays_have_the_listed_shapes(name):
    case = CASES["cases"][name]
    folder = ZOO / name
    assert sorted(p.name for p in folder.iterdir()) == sorted(case["files"]), name
    with np.load(ZOO / f"{name}.io.npz", allow_pickle=False) as io:
        arrays = dict(io)
    assert {k: list(v.shape) for k, v in arrays.items()} == case["shapes"]
    sizes = [""] + [f"_{h}x{w}" for h, w in case.get("sizes", [])]
    for suffix in sizes:
        for key in case["compare"] + ["images"]:
            assert key + suffix in arrays, f"{name}: {key + suffix} missing"
        images = arrays["images" + suffix]
        assert images.dtype == np.float32 and images.ndim == 4 and images.shape[-1] == 3  # NHWC
        n = len(images)
        for key in case["compare"]:
            out = arrays[key + suffix]
            assert out.dtype == np.float32 and len(out) == n and np.isfinite(out).all(), (name, key + suffix)
        if "tokens" in case["compare"]:
            assert arrays["tokens" + suffix].shape[-1] == arrays.get("pooled" + suffix, arrays["tokens" + suffix]).shape[-1]
        if "pixels" + suffix in arrays:  # the images are these pixels normalized with the case's mean/std
            pixels = arrays["pixels" + suffix]
            assert pixels.dtype == np.uint8 and pixels.shape == images.shape
            expected = (pixels.astype(np.float32) / 255.0 - np.float32(case["mean"])) / np.float32(case["std"])
            assert np.abs(expected - images).max() <= 1e-6
    if case.get("sizes"):
        assert list(arrays["images"].shape[1:3]) == case["trained"]


@pytest.mark.parametrize("name", NAMES)
def test_configs_and_checkpoints_agree_with_the_entry(name):
    case = CASES["cases"][name]
    folder = ZOO / name
    config = json.loads((folder / "config.json").read_text())
    if case["source"] == "timm":
        assert config["architecture"] == case["architecture"].split(".")[0]
        assert config["num_classes"] == case["num_classes"]
        assert config["pretrained_cfg"]["mean"] == pytest.approx(case["mean"])
        assert config["pretrained_cfg"]["std"] == pytest.approx(case["std"])
    else:
        assert config["architectures"] == [case["architecture"]]
        processor = json.loads((folder / "preprocessor_config.json").read_text())
        assert processor["image_mean"] == pytest.approx(case["mean"])
        assert processor["image_std"] == pytest.approx(case["std"])
    header = safetensors_header(folder / "model.safetensors")
    assert {dtype for dtype, _ in header.values()} == {"F32"}
    first = {k.replace("{i}", "0"): v for k, v in case["keys_beside_plain_vit"].items()}
    for key, shape in first.items():
        assert key in header and header[key][1] == shape, (name, key)
    if "keys" in case:  # the full listing, "{i}" standing for every block (of one shape in every block)
        general = {}
        for key, (_, shape) in header.items():
            general.setdefault(re.sub(r"\.(\d+)\.", ".{i}.", key, count=1), []).append(shape)
        assert all(shapes.count(shapes[0]) == len(shapes) for shapes in general.values())
        assert {k: v[0] for k, v in general.items()} == case["keys"], name


@pytest.mark.parametrize("repo", sorted(CASES["hub"]["repos"]))
def test_the_hub_cache_is_laid_out_as_huggingface_hub_lays_it_out(repo):
    entry = CASES["hub"]["repos"][repo]
    root = ZOO / CASES["hub"]["path"] / ("models--" + repo.replace("/", "--"))
    revision = (root / "refs" / "main").read_text()
    assert revision == entry["revision"] and len(revision) == 40
    snapshot = root / "snapshots" / revision
    case_folder = ZOO / entry["case"]
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(p.name for p in case_folder.iterdir())
    for link in snapshot.iterdir():
        assert link.is_symlink() and os.readlink(link).startswith(os.path.join("..", "..", "blobs", ""))
        blob = link.resolve()
        assert blob.parent == (root / "blobs").resolve()
        data = blob.read_bytes()
        assert data == (case_folder / link.name).read_bytes()
        if link.suffix == ".safetensors":  # LFS files: the sha256, as the hub's etag
            assert blob.name == hashlib.sha256(data).hexdigest()
        else:  # the git blob id
            assert blob.name == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.skipif(not (SHARED / "fixtures" / "zoo").is_dir(), reason="../shared is absent (a user's clone)")
def test_the_shared_cases_are_verbatim_copies():
    shared = SHARED / "fixtures" / "zoo"
    entries = json.loads((shared / "cases.json").read_text())["cases"]
    for name in CASES["origins"]["../shared/fixtures/zoo (copied verbatim)"]:
        assert CASES["cases"][name] == entries[name]
        for path in [*(shared / name).iterdir(), shared / f"{name}.io.npz"]:
            assert (ZOO / path.relative_to(shared)).read_bytes() == path.read_bytes(), path
