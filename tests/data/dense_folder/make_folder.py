"""Writes the dense data folders the tests read (committed; rerun to remake them, Pillow needed):

dense_folder/ (segmentation): images/ and masks/ as users keep them, 3 classes (classes.txt): a red disc
(1) and a blue square (2) on a textured background (0), their outlines 255 (ignore); mixed sizes, JPEG
and PNG, palette and grey masks, one JPEG stored sideways with EXIF orientation 6 (its mask upright),
and the pairs a reader must name and leave out: broken.jpg (truncated), odd.png (its mask 4 rows
short), lonely.png (a mask without an image).
depth_folder/: images/ and depth/ (16-bit PNGs in millimetres and float .npy in metres): a plane
receding upwards, the disc nearer.

    python tests/data/dense_folder/make_folder.py
"""

import io
import os

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
DEPTH = os.path.join(os.path.dirname(HERE), "depth_folder")
SIZES = [(48, 64), (64, 48), (56, 56), (40, 72), (64, 64), (48, 48), (72, 40), (56, 64), (64, 56), (48, 56),
         (56, 48), (64, 40)]


def voc_palette():
    colours = []
    for index in range(256):
        c, r, g, b = index, 0, 0, 0
        for bit in range(8):
            r |= ((c >> 0) & 1) << (7 - bit)
            g |= ((c >> 1) & 1) << (7 - bit)
            b |= ((c >> 2) & 1) << (7 - bit)
            c >>= 3
        colours += [r, g, b]
    return colours


def scene(rng, h, w):
    image = rng.integers(90, 160, size=(h, w, 3)).astype(np.uint8)
    mask = np.zeros((h, w), np.uint8)
    yy, xx = np.mgrid[:h, :w]
    r = int(rng.integers(7, 12))
    cy, cx = int(rng.integers(r, h - r)), int(rng.integers(r, w - r))
    disc = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
    s = int(rng.integers(8, 14))
    sy, sx = int(rng.integers(0, h - s)), int(rng.integers(0, w - s))
    square = (yy >= sy) & (yy < sy + s) & (xx >= sx) & (xx < sx + s)
    image[square] = (30, 40, 200)
    mask[square] = 2
    image[disc] = (210, 30, 30)
    mask[disc] = 1
    edge = np.zeros_like(mask, bool)
    for axis in (0, 1):
        for shift in (1, -1):
            edge |= np.roll(mask, shift, axis=axis) != mask
    mask[edge & (mask != 0)] = 255  # outlines: ignored
    depth = 1.0 + 3.0 * (1 - yy / (h - 1))  # 1 m at the bottom to 4 m at the top
    depth[disc] = 0.8
    return image, mask, depth.astype(np.float32)


def save(image, path, **kwargs):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image.save(path, **kwargs)


def main():
    rng = np.random.default_rng(0)
    for sub in ("images", "masks"):
        os.makedirs(os.path.join(HERE, sub), exist_ok=True)
    with open(os.path.join(HERE, "classes.txt"), "w") as f:
        f.write("background\ndisc\nsquare\n")
    palette = voc_palette()
    for i, (h, w) in enumerate(SIZES):
        image, mask, depth = scene(rng, h, w)
        name = f"scene_{i:02d}"
        if i % 3 == 0:
            save(Image.fromarray(image), os.path.join(HERE, "images", f"{name}.png"))
        else:
            save(Image.fromarray(image), os.path.join(HERE, "images", f"{name}.jpg"), quality=95)
        if i % 2 == 0:
            p = Image.frombytes("P", (w, h), mask.tobytes())
            p.putpalette(palette)
            save(p, os.path.join(HERE, "masks", f"{name}.png"))
        else:
            save(Image.fromarray(mask), os.path.join(HERE, "masks", f"{name}.png"))
        if i < 6:
            save(Image.fromarray(image), os.path.join(DEPTH, "images", f"{name}.png"))
            if i % 2:
                np.save(os.path.join(DEPTH, "depth", f"{name}.npy"), depth)
            else:
                millimetres = np.round(depth * 1000).astype(np.uint16)
                save(Image.fromarray(millimetres), os.path.join(DEPTH, "depth", f"{name}.png"))
    # stored sideways: the file's pixels are the upright image turned 90 degrees anticlockwise, and
    # EXIF orientation 6 (turn clockwise to view) makes it upright; its mask is the upright one
    image, mask, _ = scene(rng, 40, 64)
    exif = Image.Exif()
    exif[0x0112] = 6
    save(Image.fromarray(np.rot90(image, 1)), os.path.join(HERE, "images", "sideways.jpg"), quality=95,
         exif=exif.tobytes())
    save(Image.fromarray(mask), os.path.join(HERE, "masks", "sideways.png"))
    image, mask, _ = scene(rng, 48, 48)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "JPEG", quality=95)
    with open(os.path.join(HERE, "images", "broken.jpg"), "wb") as f:
        f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    save(Image.fromarray(mask), os.path.join(HERE, "masks", "broken.png"))
    image, mask, _ = scene(rng, 64, 64)
    save(Image.fromarray(image), os.path.join(HERE, "images", "odd.png"))
    save(Image.fromarray(mask[:60]), os.path.join(HERE, "masks", "odd.png"))
    save(Image.fromarray(mask), os.path.join(HERE, "masks", "lonely.png"))


if __name__ == "__main__":
    main()
