"""Parameter memory per device under keras_vit.layout_map, and the picture of a (data, model) mesh.

    python benchmarks/parallel_memory.py          # writes benchmarks/parallel_memory.md and docs/mesh.png

Counted from the layouts, not measured on devices: `keras_vit.parallel.parameter_bytes` builds one block of
each preset (the blocks are alike) and adds up each variable's largest shard. tests/test_parallel.py checks
the same count against the bytes jax puts on each of 8 CPU devices for a tiny ViT. float32 parameters; the
figure in brackets is 4x, parameters, gradients and Adam's two moments. Activations come on top.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ("L/16", "H/14", "g/14", "G/14", "e/14")
MESHES = ((1, 1), (2, 4), (2, 8), (4, 8))


def table(rows):
    head = "| model | parameters | " + " | ".join("1 device" if m == (1, 1) else f"mesh {m[0]}x{m[1]}"
                                                  for m in MESHES) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(MESHES)]
    for name, count, per_device in rows:
        cells = " | ".join(f"{b / 1e9:.2f} GB ({4 * b / 1e9:.1f} GB)" for b in per_device)
        lines.append(f"| ViT-{name} | {count / 1e6:.0f}M | {cells} |")
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, (grid, bars) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw=dict(width_ratios=(1.1, 1)))
    data, model = 2, 4
    colours = plt.get_cmap("tab10")
    for d in range(data):
        for m in range(model):
            grid.add_patch(Rectangle((m, data - 1 - d), 0.94, 0.94, facecolor=colours(m), alpha=0.25 + 0.35 * d))
            grid.text(m + 0.47, data - 1 - d + 0.62, f"device {d * model + m}", ha="center", fontsize=9)
            grid.text(m + 0.47, data - 1 - d + 0.30,
                      f"query[{'h/2:' if d else ':h/2'},\n {m}h/4:{m + 1}h/4]", ha="center", fontsize=8)
    grid.set_xlim(-0.1, model)
    grid.set_ylim(-0.1, data)
    grid.set_xticks([m + 0.47 for m in range(model)], [f"model {m}" for m in range(model)])
    grid.set_yticks([data - 1 - d + 0.47 for d in range(data)], [f"data {d}" for d in range(data)])
    grid.set_title("mesh 2x4: each device's tile of one block's query kernel (h x h)\n"
                   "columns (heads) split on 'model', rows on 'data'; the batch splits on 'data'", fontsize=9)
    for spine in grid.spines.values():
        spine.set_visible(False)
    x = range(len(MESHES))
    width = 0.8 / len(rows)
    for i, (name, _, per_device) in enumerate(rows):
        bars.bar([j + i * width for j in x], [4 * b / 1e9 for b in per_device], width, label=f"ViT-{name}")
    bars.set_xticks([j + 0.4 - width / 2 for j in x], ["1 device" if m == (1, 1) else f"{m[0]}x{m[1]}" for m in MESHES])
    bars.set_yscale("log")
    bars.set_ylabel("GB per device: parameters, gradients, Adam (float32)")
    bars.set_title("training state per device, by mesh", fontsize=9)
    bars.grid(True, axis="y", which="both", alpha=0.3)
    bars.legend(fontsize=8)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(HERE, "parallel_memory.md"))
    p.add_argument("--figure", default=os.path.join(ROOT, "docs", "mesh.png"))
    p.add_argument("--models", nargs="+", default=list(MODELS))
    args = p.parse_args(argv)
    from keras_vit.config import ViTConfig
    from keras_vit.parallel import parameter_bytes

    rows = []
    for name in args.models:
        config = ViTConfig.from_preset(name)
        counts = [parameter_bytes(config, mesh) for mesh in MESHES]
        rows.append((name, counts[0]["total"] // 4, [c["per_device"] for c in counts]))
        print(f"ViT-{name}: {rows[-1][1]:,} parameters", flush=True)
    text = ("# Parameter memory per device (`python benchmarks/parallel_memory.py`)\n\n"
            "float32, 224 px, a 1000-class head; in brackets 4x (parameters, gradients, Adam's two moments). "
            "Counted from `keras_vit.layout_map`'s layouts (`keras_vit.parallel.parameter_bytes`).\n\n"
            + table(rows) + "\n")
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, args.out)
    plot(rows, args.figure)
    print(text)


if __name__ == "__main__":
    main()
