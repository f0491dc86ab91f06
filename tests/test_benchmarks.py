"""The benchmark report: rendering and target bookkeeping (no timing: speed is never asserted)."""

import json
import os
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import run as bench  # noqa: E402


def _speed(task, ours, hub, timm=None):
    times = {"keras-vit": {p: [8 / v] * 3 for p, v in ours.items()},
             "keras-hub": {p: [8 / v] * 3 for p, v in hub.items()}}
    if timm:
        times["timm"] = {p: [8 / v] * 3 for p, v in timm.items()}
    return {"task": task, "variant": "B/16", "batch": 8, "rounds": 3, "times_s": times, "load_during": [4.0],
            "img_per_s": {k: {p: 8 / ts[0] for p, ts in v.items()} for k, v in times.items()}}


def test_speed_table_marks_each_target():
    table = bench.speed_table(_speed("infer", {"float32": 2.6, "bfloat16": 4.8}, {"float32": 2.5, "bfloat16": 3.8},
                                     {"float32": 2.2, "bfloat16": 4.3}))
    f32, bf16 = [line for line in table.splitlines() if line.startswith(("| float32", "| bfloat16"))]
    assert f32.endswith("| keras-hub: yes; timm: **no** |")  # 1.04x keras-hub, 1.18x timm < 1.3x
    assert bf16.endswith("| timm: yes; keras-hub: yes |")  # 1.12x timm, 1.26x keras-hub
    assert "float32 vs keras-hub 1.04x (1.04-1.04)" in table
    table = bench.speed_table(_speed("infer", {"float32": 2.6, "bfloat16": 4.8}, {"float32": 2.7, "bfloat16": 4.0},
                                     {"float32": 2.0, "bfloat16": 4.3}))
    f32, bf16 = [line for line in table.splitlines() if line.startswith(("| float32", "| bfloat16"))]
    assert f32.endswith("| keras-hub: **no**; timm: yes |")  # 0.96x keras-hub, 1.3x timm
    assert bf16.endswith("| timm: yes; keras-hub: **no** |")  # 1.12x timm, 1.2x keras-hub


def test_committed_results_render():
    results = json.loads((ROOT / "benchmarks" / "results.json").read_text())
    text = bench.render(results, "python benchmarks/run.py")
    for section in ("## Inference", "## Training", "## TFLite", "## Memory", "## Where the time goes"):
        assert section in text


def test_worker_and_memory_scripts_parse_their_arguments():
    for script in ("worker.py", "memory.py", "tflite_bench.py", "agreement.py", "profile_block.py", "run.py",
                   "datasize.py", "recipe_cost.py", "photos.py", "transfer.py"):
        out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, (script, out.stderr[-2000:])


def test_transfer_demo_reads_fashion_mnist_as_debian_ships_it_and_renders_its_table(tmp_path):
    """Fashion-MNIST's idx files, written as the Debian package ships them (gzip), read back; the table."""
    import gzip

    import numpy as np
    import transfer

    images = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    with gzip.open(tmp_path / "x.gz", "wb") as f:
        f.write(bytes([0, 0, 8, 3]) + (2).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2 + images.tobytes())
    assert np.array_equal(transfer.read_idx(tmp_path / "x.gz"), images)
    rows = [{"per_class": 100, "arm": arm, "steps": 300, "batch": 128, "test_accuracy": a}
            for arm, a in (("fine-tuned", 0.8), ("scratch, same settings", 0.7), ("scratch, recipe settings", 0.75))]
    assert "| 100 | 300 (128) | 80.00% | 70.00% | 75.00% |" in transfer.table(rows)


def test_photo_benchmark_writes_mixed_size_photos_some_exif_turned(tmp_path):
    import photos

    from keras_vit import images

    photos.write_photos(tmp_path, 20, classes=2)
    files = sorted(tmp_path.rglob("*.jpg"))
    infos = [images.inspect(str(f)) for f in files]
    assert len(files) == 20 and all(i.problem is None for i in infos)
    assert len({(i.width, i.height) for i in infos}) > 10 and sum(i.orientation == 6 for i in infos) == 2


def test_datasize_study_renders_its_table_and_figure(tmp_path):
    import datasize

    rows = [{"model": m, "fraction": f, "train_examples": int(47500 * f), "steps": 1500, "test_accuracy": a,
             "fewshot_mean": a - 0.05, "fewshot_std": 0.01}
            for m, acc in (("ViT", (0.4, 0.5, 0.6)), ("hybrid", (0.55, 0.65, 0.7)))
            for f, a in zip((0.1, 0.3, 1.0), acc)]
    text = datasize.table(rows, 10)
    assert "| hybrid | 14,250 (30%) | 1,500 | 65.00% | 60.00% +- 1.0 |" in text
    datasize.figure(rows, 10, tmp_path / "datasize.png")
    assert (tmp_path / "datasize.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # measuring one model again keeps the other's rows, each with the command that measured it
    datasize.write_results(tmp_path, [dict(r, command="first") for r in rows], 10)
    again = [dict(r, test_accuracy=0.8, command="second") for r in rows if r["model"] == "hybrid"]
    merged = datasize.write_results(tmp_path, again, 10)
    assert [(r["model"], r["command"]) for r in merged] == [("ViT", "first")] * 3 + [("hybrid", "second")] * 3
    assert [r["test_accuracy"] for r in merged] == [0.4, 0.5, 0.6, 0.8, 0.8, 0.8]
    assert "Reproduce: `first`; `second`" in (tmp_path / "datasize.md").read_text()


def test_datasize_runs_both_recipes_with_the_same_augmentation_unless_told(tmp_path, monkeypatch):
    """The study compares priors: the recipes' RandAugment is off in its runs, as in the table;
    a user's --set randaugment=... is applied after and wins."""
    import datasize

    from keras_vit import training

    commands = []

    def fake_run(command, check, cwd):  # records the command and leaves what a finished run leaves
        commands.append(command)
        model_dir = command[command.index("--model-dir") + 1]
        os.makedirs(model_dir)
        with open(os.path.join(model_dir, "metrics.json"), "w") as f:
            json.dump({"test_accuracy": 0.5}, f)

    monkeypatch.setattr(datasize.subprocess, "run", fake_run)
    for recipe, extra in (("cifar10_hybrid", ()), ("cifar10", ("randaugment=(2, 5)",))):
        datasize.train_run(recipe, "data.tgz", 0.1, 1000, 10, str(tmp_path / recipe), 47500, extra)
    for command, expected in zip(commands, (None, (2, 5))):
        recipe = command[command.index("train") + 1]
        config = training.load_recipe(recipe)
        sets = [command[i + 1] for i, arg in enumerate(command) if arg == "--set"]
        config = training.apply_overrides(config, sets)
        assert config["randaugment"] == expected, (recipe, sets)
        assert config["max_train_examples"] == 4750 and config["steps_per_epoch"] == 100
    for recipe in ("cifar10_hybrid", "cifar10"):
        assert training.load_recipe(recipe)["randaugment"] == (2, 5), recipe  # what the pin turns off


def test_backends_table_compares_each_backend_with_tensorflow():
    info = {f"keras-vit {b}": {"ready": {"float32": {"first_step_s": 2.0}},
                               "versions": {"tensorflow": "2.21", **({b: "1.0"} if b != "tensorflow" else {})}}
            for b in ("tensorflow", "jax", "torch")}
    part = {"variant": "B/16", "batch": 8, "rounds": 3, "info": info, "load_during": [3.0],
            "img_per_s": {"keras-vit tensorflow": 2.0, "keras-vit jax": 3.0, "keras-vit torch": 1.0}}
    rows = [line for line in bench.backends_table(part).splitlines() if line.startswith("| j") or
            line.startswith("| t")]
    assert rows == ["| tensorflow | 2.00 | 1.00x | 2.0 | 2.21 |", "| jax | 3.00 | 1.50x | 2.0 | 1.0 |",
                    "| torch | 1.00 | 0.50x | 2.0 | 1.0 |"]


def test_recipe_cost_scales_each_step_to_its_full_run_against_the_budget():
    import recipe_cost

    class Model:
        def count_params(self):
            return 1000

    def entry(name, batch, epochs, step_s, cpu_s):
        config = {"batch_size": batch, "epochs": epochs, "steps_per_epoch": None}
        return {"recipe": name, "config": config, "precision": "float32", "jit_compile": False, "model": Model(),
                "wall": [step_s, step_s * 3, step_s], "cpu": [cpu_s, cpu_s, cpu_s * 5]}

    rows = recipe_cost.summarize([entry("vit", 100, 50, 1.0, 2.0), entry("hybrid", 50, 20, 2.0, 3.0)], 10_000)
    vit, hybrid = rows
    assert vit["run_cpu_min"] == 50 * 100 * 2.0 / 60 and vit["x_budget"] == 1.0  # medians, not means
    assert hybrid["run_cpu_min"] == 20 * 200 * 3.0 / 60 and hybrid["cpu_ms_per_image"] == 60.0
    assert round(hybrid["x_budget"], 9) == 1.2 and round(hybrid["epochs_in_budget"], 6) == round(20 / 1.2, 6)
    assert "| hybrid | float32 | off | 50 | 2.000 | 60.0 | 20 | 133 | 200 | 1.20 | 16.7 |" in (
        recipe_cost.table(rows, 10_000))


def test_recipe_cost_builds_and_times_a_recipe_as_keras_vit_train_does(tmp_path):
    import recipe_cost

    out = tmp_path / "cost.md"
    rows = recipe_cost.main(["--recipes", "digits", "--rounds", "2", "--warmup", "1", "--train-examples", "1437",
                             "--out", str(out)])
    assert [r["recipe"] for r in rows] == ["digits"] and rows[0]["rounds"] == 2
    assert rows[0]["step_s"] > 0 and rows[0]["x_budget"] == 1.0
    assert "| digits |" in out.read_text() and json.loads(out.with_suffix(".json").read_text())["rows"]


def test_parallel_memory_writes_its_table_and_figure(tmp_path):
    import parallel_memory

    parallel_memory.main(["--models", "L/16", "--out", str(tmp_path / "t.md"), "--figure", str(tmp_path / "m.png")])
    table = (tmp_path / "t.md").read_text()
    # ViT-L/16: 304M float32 parameters (1.22 GB); on a 2x4 mesh each device holds 0.16 GB of them
    assert "| ViT-L/16 | 304M | 1.22 GB (4.9 GB) | 0.16 GB (0.6 GB) |" in table
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
