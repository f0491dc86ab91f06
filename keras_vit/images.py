"""Photos as users keep them: read safely, turned upright, made RGB, and seen as the model sees them.

One definition each, for `keras-vit train`, `predict`, `fewshot`, `visualize` and the exports' graphs:

- `inspect`: an image file's format, size and EXIF orientation from its header, before any pixel is
  decoded: a header that claims more than `max_image_pixels()` pixels (a decompression bomb, e.g. a
  50,000 x 50,000 PNG of a few kilobytes) is refused here, as are files that are no image and files
  cut short (a truncated JPEG has no end-of-image marker; the few files whose end looks wrong are
  decoded once to tell a damaged file from one with trailing data, such as a motion photo).
- `decode`: TensorFlow's decoders (JPEG, PNG, GIF's first frame, BMP, WebP, in the tf.data graph,
  in parallel) to RGB uint8 from grayscale, RGBA, CMYK and 16-bit PNGs, then the EXIF orientation.
  TensorFlow misreads palette BMPs and cannot read animated WebPs: those few go to Pillow when it is
  installed (decoding in the graph is 4x faster than Pillow through `tf.numpy_function`, measured on
  500x375 JPEGs: 609 against 153 images/s on 2 cores, so Pillow is not a dependency).
- `model_view`: the evaluation view of an image: the central `crop_pct` of its shorter side (a square;
  the whole image at 1.0, the paper's plain resize) resized to the model's size, bilinear or bicubic,
  antialiased when shrinking, as separable weight matrices: the same numbers as
  `tf.image.resize(..., antialias=True)` (to 2e-4 of a pixel level) with ops that every export
  converter takes (MatMul, no ScaleAndTranslate).
"""

from __future__ import annotations

import io
import logging
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, NamedTuple, Sequence

import numpy as np

if TYPE_CHECKING:
    import keras

    from keras_vit._common import Tensor

log = logging.getLogger(__name__)

# Pillow refuses images over twice its 89.5-megapixel warning; so do we, before decoding.
MAX_IMAGE_PIXELS = 178_956_970
MAX_PIXELS_ENV = "KERAS_VIT_MAX_IMAGE_PIXELS"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
INTERPOLATIONS = ("bilinear", "bicubic")

DECODE_TF, DECODE_PILLOW = 0, 1


class ImageInfo(NamedTuple):
    """What an image file's header says: format ("jpeg", "png", "gif", "bmp", "webp"), width and
    height as stored, EXIF orientation (1-8, 1 upright), which decoder reads it (DECODE_TF or
    DECODE_PILLOW) and, for a file that cannot be used, why (`problem`, else None)."""

    format: str
    width: int
    height: int
    orientation: int = 1
    decoder: int = DECODE_TF
    problem: str | None = None
    mode: str = ""  # what becomes RGB: "grayscale", "grayscale+alpha", "RGBA", "CMYK", "16-bit ..."; "" for RGB

    @property
    def upright_size(self):
        """(height, width) after the EXIF orientation (5-8 swap the sides)."""
        return (self.width, self.height) if self.orientation >= 5 else (self.height, self.width)


def max_image_pixels() -> int:
    """The most pixels an image header may claim: $KERAS_VIT_MAX_IMAGE_PIXELS, else MAX_IMAGE_PIXELS."""
    value = os.environ.get(MAX_PIXELS_ENV)
    if not value:
        return MAX_IMAGE_PIXELS
    try:
        limit = int(value)
    except ValueError:
        raise ValueError(f"${MAX_PIXELS_ENV}={value!r} is not a number of pixels (e.g. 200000000).") from None
    if limit < 1:
        raise ValueError(f"${MAX_PIXELS_ENV}={value!r} must be positive.")
    return limit


def is_image_name(name: str | os.PathLike) -> bool:
    return os.fspath(name).lower().endswith(IMAGE_EXTENSIONS)


# --- headers ---------------------------------------------------------------------------------

class _Bad(Exception):
    """A header that is not what its format says; the message is the reason."""


class _Reader:
    """Reads byte ranges of a file or of bytes; `size` is the total length."""

    def __init__(self, handle, size):
        self.handle, self.size = handle, size

    def at(self, offset, count):
        if offset < 0 or offset >= self.size:
            return b""
        self.handle.seek(offset)
        return self.handle.read(count)

    def need(self, offset, count, what):
        data = self.at(offset, count)
        if len(data) < count:
            raise _Bad(f"truncated {what} (the file ends at byte {self.size})")
        return data


def _exif_orientation(tiff):
    """The Orientation tag (0x0112) of IFD0 in a TIFF-structured EXIF block; 1 when absent or odd."""
    if tiff[:2] == b"II":
        order = "<"
    elif tiff[:2] == b"MM":
        order = ">"
    else:
        return 1
    try:
        (ifd,) = struct.unpack_from(order + "I", tiff, 4)
        (count,) = struct.unpack_from(order + "H", tiff, ifd)
        for i in range(min(count, 512)):
            tag, kind, _ = struct.unpack_from(order + "HHI", tiff, ifd + 2 + 12 * i)
            if tag == 0x0112:
                (value,) = struct.unpack_from(order + ("H" if kind == 3 else "I"), tiff, ifd + 10 + 12 * i)
                return value if 1 <= value <= 8 else 1
    except struct.error:
        pass
    return 1


_JPEG_FRAMES = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg(r):
    pos, orientation, frame = 2, 1, None
    while True:
        head = r.need(pos, 2, "JPEG header")
        if head[0] != 0xFF:
            raise _Bad(f"JPEG header: no marker at byte {pos}")
        marker = head[1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        if marker == 0xD9:
            raise _Bad("JPEG header: the image ends before its scan")
        (length,) = struct.unpack(">H", r.need(pos + 2, 2, "JPEG header"))
        if marker == 0xE1 and orientation == 1:
            segment = r.at(pos + 4, length - 2)
            if segment.startswith(b"Exif\0\0"):
                orientation = _exif_orientation(segment[6:])
        elif marker in _JPEG_FRAMES:
            _, height, width, components = struct.unpack(">BHHB", r.need(pos + 4, 6, "JPEG frame header"))
            frame = (width, height, {1: "grayscale", 4: "CMYK"}.get(components, ""))
        elif marker == 0xDA:
            break
        pos += 2 + length
    if frame is None:
        raise _Bad("JPEG without a frame header")
    # A complete JPEG ends with its end-of-image marker (a few writers pad after it).
    complete = b"\xff\xd9" in r.at(max(r.size - 64, 0), 64)
    return "jpeg", frame[0], frame[1], orientation, DECODE_TF, complete, frame[2]


_PNG_MODES = {0: "grayscale", 4: "grayscale+alpha", 6: "RGBA"}


def _png(r):
    ihdr = r.need(8, 25, "PNG header")
    if ihdr[4:8] != b"IHDR":
        raise _Bad("PNG without an IHDR chunk")
    width, height, depth, colour = struct.unpack(">IIBB", ihdr[8:18])
    mode = " ".join(m for m in ("16-bit" if depth == 16 else "", _PNG_MODES.get(colour, "")) if m)
    orientation, pos = 1, 8
    while pos + 8 <= r.size:  # eXIf counts before the image data, as browsers read it
        length, kind = struct.unpack(">I4s", r.need(pos, 8, "PNG chunk"))
        if kind == b"IDAT":
            break
        if kind == b"eXIf":
            orientation = _exif_orientation(r.at(pos + 8, length))
        pos += 12 + length
    complete = r.at(max(r.size - 12, 0), 12)[4:8] == b"IEND"
    return "png", width, height, orientation, DECODE_TF, complete, mode


def _gif(r):
    width, height = struct.unpack("<HH", r.need(6, 4, "GIF header"))
    complete = r.at(max(r.size - 16, 0), 16).rstrip(b"\0").endswith(b";")
    return "gif", width, height, 1, DECODE_TF, complete, ""


def _bmp(r):
    (header,) = struct.unpack("<I", r.need(14, 4, "BMP header"))
    if header == 12:  # OS/2 BITMAPCOREHEADER
        width, height, _, bits = struct.unpack("<HHHH", r.need(18, 8, "BMP header"))
        compression = 0
    else:
        width, height, _, bits, compression = struct.unpack("<iiHHI", r.need(18, 16, "BMP header"))
    (offset,) = struct.unpack("<I", r.need(10, 4, "BMP header"))
    width, height = abs(width), abs(height)
    # TensorFlow reads 24- and 32-bit uncompressed BMPs; it misreads palettes (1-8 bits) as grey levels.
    decoder = DECODE_TF if bits in (24, 32) and compression == 0 else DECODE_PILLOW
    complete = compression != 0 or offset + ((width * bits + 31) // 32) * 4 * height <= r.size
    return "bmp", width, height, 1, decoder, complete, "RGBA" if bits == 32 else ""


def _webp(r):
    riff = r.need(0, 30, "WebP header")
    (riff_size,) = struct.unpack("<I", riff[4:8])
    kind = riff[12:16]
    orientation, decoder = 1, DECODE_TF
    if kind == b"VP8 ":
        if riff[23:26] != b"\x9d\x01\x2a":
            raise _Bad("WebP (VP8) without a frame start code")
        width, height = (v & 0x3FFF for v in struct.unpack("<HH", riff[26:30]))
    elif kind == b"VP8L":
        if riff[20] != 0x2F:
            raise _Bad("WebP (VP8L) without its signature")
        (bits,) = struct.unpack("<I", riff[21:25])
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif kind == b"VP8X":
        flags = riff[20]
        width = 1 + int.from_bytes(riff[24:27], "little")
        height = 1 + int.from_bytes(riff[27:30], "little")
        if flags & 0x02:  # animated: TensorFlow needs RGBA for those, and crashed on the request here
            decoder = DECODE_PILLOW
        pos = 30
        while flags & 0x08 and pos + 8 <= r.size:
            name, length = struct.unpack("<4sI", r.need(pos, 8, "WebP chunk"))
            if name == b"EXIF":
                block = r.at(pos + 8, length)
                orientation = _exif_orientation(block[6:] if block.startswith(b"Exif\0\0") else block)
                break
            pos += 8 + length + (length & 1)
    else:
        raise _Bad(f"WebP of an unknown kind {kind!r}")
    return "webp", width, height, orientation, decoder, riff_size + 8 <= r.size, ""


_FORMATS = ((b"\xff\xd8\xff", _jpeg), (b"\x89PNG\r\n\x1a\n", _png), (b"GIF87a", _gif), (b"GIF89a", _gif),
            (b"BM", _bmp))


def _probe(r):
    magic = r.at(0, 16)
    for prefix, parse in _FORMATS:
        if magic.startswith(prefix):
            return parse(r)
    if magic[:4] == b"RIFF" and magic[8:12] == b"WEBP":
        return _webp(r)
    if not magic:
        raise _Bad("an empty file")
    raise _Bad("Unknown image file format. keras-vit reads JPEG, PNG, GIF, BMP and WebP")


def inspect(source: str | os.PathLike | bytes, verify: bool = True) -> ImageInfo:
    """The `ImageInfo` of an image file (a path) or of encoded bytes, from its header.

    Problems come back in `problem` rather than raised: "decompression bomb: ..." when the
    header claims more than `max_image_pixels()`, "truncated ..." or another reason for a file
    that cannot be read. With `verify`, a file whose end does not look like its format's end is
    decoded once, to tell damage from trailing data.

    Example:
    >>> inspect("photo.jpg")
    ImageInfo(format='jpeg', width=4032, height=3024, orientation=6, decoder=0, problem=None, mode='')
    """
    try:
        if isinstance(source, (bytes, bytearray, memoryview)):
            info = _probe(_Reader(io.BytesIO(source), len(source)))
        else:
            with open(source, "rb") as f:
                info = _probe(_Reader(f, os.fstat(f.fileno()).st_size))
    except _Bad as e:
        return ImageInfo("", 0, 0, problem=str(e))
    except (OSError, struct.error) as e:
        return ImageInfo("", 0, 0, problem=getattr(e, "strerror", None) or str(e))
    format, width, height, orientation, decoder, complete, mode = info
    if width < 1 or height < 1:
        return ImageInfo(format, width, height, problem=f"{format.upper()} header says {width}x{height} pixels")
    limit = max_image_pixels()
    if width * height > limit:
        return ImageInfo(format, width, height, orientation, decoder, problem=(
            f"decompression bomb: its {format.upper()} header claims {width}x{height} = {width * height:,} pixels, "
            f"over the limit of {limit:,} (${MAX_PIXELS_ENV} raises it); not decoded"))
    info = ImageInfo(format, width, height, orientation, decoder, mode=mode)
    if not complete and verify:
        try:
            decode_eager(_read_bytes(source), info)
        except ValueError as e:
            return info._replace(problem=f"truncated or damaged {format.upper()}: {e}")
    return info


def _read_bytes(source):
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    with open(source, "rb") as f:
        return f.read()


def inspect_many(sources: Sequence[str | os.PathLike | bytes], verify: bool = True, workers: int = 8) -> list[ImageInfo]:
    """`inspect` over many files, in threads (the time goes to opening files); a list of ImageInfo."""
    sources = list(sources)
    if len(sources) < 64:
        return [inspect(s, verify) for s in sources]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda s: inspect(s, verify), sources))


def check(info: ImageInfo, name: str | os.PathLike) -> None:
    """Raises the ValueError a file's `ImageInfo.problem` calls for, naming the file."""
    if info.problem is None:
        return
    if info.problem.startswith("decompression bomb"):
        raise ValueError(f"{name}: {info.problem}.")
    raise ValueError(f"{name} is not an image that can be read: {info.problem}.")


# --- decoding --------------------------------------------------------------------------------

def _pillow_rgb(data):
    """Pillow's first frame as RGB uint8 (no EXIF turn: `orient` does that for every decoder)."""
    try:
        from PIL import Image
    except ImportError:
        raise ValueError("this kind of image (a palette BMP or an animated WebP) needs Pillow, which "
                         "TensorFlow's decoders lack: pip install pillow") from None
    try:
        with Image.open(io.BytesIO(bytes(data))) as image:
            image.seek(0)
            return np.ascontiguousarray(np.asarray(image.convert("RGB"), dtype=np.uint8))
    except Exception as e:  # Pillow raises many kinds, all meaning "cannot read this"
        raise ValueError(f"Pillow cannot read it: {e}") from None


def orient(image: Tensor, orientation: Tensor | int) -> Tensor:
    """An (H, W, C) image as stored -> upright, for EXIF orientation 1-8 (a tensor or an int)."""
    import tensorflow as tf

    def transpose(x):
        return tf.transpose(x, [1, 0, 2])

    branches = [
        lambda: image,                                   # 1: upright
        lambda: image[:, ::-1],                          # 2: mirrored left-right
        lambda: image[::-1, ::-1],                       # 3: upside down
        lambda: image[::-1],                             # 4: mirrored top-bottom
        lambda: transpose(image),                        # 5: mirrored along the main diagonal
        lambda: tf.image.rot90(image, 3),                # 6: turned: rotate 90 degrees clockwise
        lambda: transpose(image[::-1, ::-1]),            # 7: mirrored along the other diagonal
        lambda: tf.image.rot90(image, 1),                # 8: turned: rotate 90 degrees anticlockwise
    ]
    if isinstance(orientation, (int, np.integer)):
        return branches[int(orientation) - 1 if 1 <= orientation <= 8 else 0]()
    index = tf.clip_by_value(tf.cast(orientation, tf.int32) - 1, 0, 7)
    return tf.switch_case(index, branches)


def decode(data: Tensor | bytes, orientation: Tensor | int = 1, decoder: Tensor | int = DECODE_TF,
           pillow: bool = False) -> Tensor:
    """Encoded bytes (a scalar string tensor) -> upright RGB uint8 (H, W, 3), in a tf.data graph or eagerly.

    `decoder` picks Pillow for the files `inspect` routes to it; `pillow=False` leaves that branch
    out of the graph (a split without such files needs no Python in its pipeline).
    """
    import tensorflow as tf

    def with_tf():
        return tf.io.decode_image(data, channels=3, expand_animations=False, dtype=tf.uint8)

    if pillow:
        image = tf.cond(tf.equal(decoder, DECODE_PILLOW),
                        lambda: tf.numpy_function(_pillow_rgb, [data], tf.uint8, stateful=False), with_tf)
    else:
        image = with_tf()
    image = tf.ensure_shape(image, [None, None, 3])
    return orient(image, orientation)


def decode_eager(data: bytes, info: ImageInfo) -> np.ndarray:
    """`decode` run once, eagerly, on bytes whose header gave `info`: upright RGB uint8 (numpy)."""
    import tensorflow as tf

    if info.decoder == DECODE_PILLOW:
        image = _pillow_rgb(data)
    else:
        try:
            image = tf.io.decode_image(data, channels=3, expand_animations=False, dtype=tf.uint8)
        except (tf.errors.InvalidArgumentError, tf.errors.UnknownError, ValueError) as e:
            raise ValueError(tf_reason(e)) from None
    return np.asarray(orient(tf.convert_to_tensor(image), info.orientation))


def tf_reason(error: BaseException) -> str:
    """A TensorFlow op error's message without the op's wrapping ({{function_node ...}}, [Op:...])."""
    import re

    text = getattr(error, "message", None) or str(error)
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    text = re.sub(r"\s*\[Op:\w+\].*$", "", text, flags=re.S)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def read_image(source: str | os.PathLike | bytes, name: str | None = None) -> np.ndarray:
    """An image file (a path) or encoded bytes -> upright RGB uint8 (H, W, 3), its header checked first.

    Raises:
        FileNotFoundError: the file does not exist (or is a folder).
        ValueError: no image, a damaged one, or a decompression bomb (never decoded), naming it.
    """
    if not isinstance(source, (bytes, bytearray, memoryview)):
        source = os.fspath(source)
        name = name or source
        if not os.path.isfile(source):
            raise FileNotFoundError(f"image {source} does not exist." if not os.path.isdir(source)
                                    else f"image {source} is a folder, not an image file.")
    name = name or "image bytes"
    info = inspect(source, verify=False)
    check(info, name)
    try:
        image = decode_eager(_read_bytes(source), info)
    except ValueError as e:
        raise ValueError(f"{name} is not an image that can be read: {e}") from None
    if info.mode:
        dropped = " (alpha dropped)" if "alpha" in info.mode or "RGBA" in info.mode else ""
        log.info("%s: converted %s to RGB%s", name, info.mode, dropped)
    return image


def list_images(folder: str | os.PathLike[str], recursive: bool = True) -> tuple[list[str], list[str]]:
    """(image files, other files) under `folder`, sorted by relative path; hidden files are neither."""
    images: list[str] = []
    others: list[str] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if recursive else []
        for f in sorted(files):
            if f.startswith("."):
                continue
            (images if is_image_name(f) else others).append(os.path.join(root, f))
    key = lambda p: os.path.relpath(p, folder).split(os.sep)  # noqa: E731
    return sorted(images, key=key), sorted(others, key=key)


# --- the model's view ----------------------------------------------------------------------------

def view_policy(model: keras.Model | None = None, crop_pct: float | None = None,
                interpolation: str | None = None) -> tuple[float, str]:
    """(crop_pct, interpolation) for `model_view`: the arguments, else the model's, else (1.0, "bilinear")."""
    crop = crop_pct if crop_pct is not None else getattr(model, "crop_pct", None)
    method = interpolation or getattr(model, "interpolation", None) or "bilinear"
    crop = 1.0 if crop is None else float(crop)
    if not 0.0 < crop <= 1.0:
        raise ValueError(f"crop_pct must be in (0, 1], got {crop}.")
    if method not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {method!r}.")
    return crop, method


def _kernel(d, method):
    import tensorflow as tf

    if method == "bilinear":
        return tf.maximum(1.0 - d, 0.0)
    a = -0.5  # Keys' cubic, as tf.image.resize and Pillow's bicubic
    near = ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
    far = ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
    return tf.where(d <= 1.0, near, tf.where(d < 2.0, far, tf.zeros_like(d)))


def _weights(n_in, offset, window, n_out, method):
    """(n_out, n_in) resampling weights from `window` input pixels starting at `offset` to n_out:
    half-pixel centres, the kernel widened by window / n_out when shrinking (antialiasing), rows
    renormalized where they pass the window's edge: tf.image.resize(antialias=True)'s weights."""
    import tensorflow as tf

    window = tf.cast(window, tf.float32)
    step = window / float(n_out)
    support = tf.maximum(step, 1.0)
    centres = (tf.range(n_out, dtype=tf.float32) + 0.5) * step
    pixels = tf.range(tf.cast(n_in, tf.float32), dtype=tf.float32) + 0.5 - tf.cast(offset, tf.float32)
    inside = tf.cast((pixels > 0.0) & (pixels < window), tf.float32)
    w = _kernel(tf.abs(pixels[None, :] - centres[:, None]) / support, method) * inside[None, :]
    return w / tf.reduce_sum(w, axis=1, keepdims=True)


def model_view(images: np.ndarray | Tensor, size: int | Sequence[int], crop_pct: float = 1.0,
               interpolation: str = "bilinear", portable: bool = False) -> Tensor:
    """Images (H, W, 3) or (N, H, W, 3), pixels 0-255 of any dtype and size -> float32 at `size`.

    The central `crop_pct` of the shorter side (a square; below 1.0 only, as timm's resize to
    size / crop_pct then centre crop) or the whole image (1.0: the paper's plain resize), resized with
    `interpolation` ("bilinear" or "bicubic"), antialiased when shrinking, clipped to [0, 255]. At the
    model's own size and crop_pct 1.0 it is the identity. The one definition of what a model sees at
    evaluation: training's evaluation, predict, fewshot, visualize and the exports' graphs.

    `portable=True` computes it as two weight matrices (MatMul: ops that tf2onnx, TF.js and Core ML
    convert, for export graphs); otherwise with `tf.image.resize(antialias=True)` on the crop
    (TensorFlow's ScaleAndTranslate op: far less work on a large photo). The two agree to 5e-4 of a
    pixel level (tests/test_photos.py).

    Example:
    >>> model_view(photo, (224, 224), crop_pct=0.9, interpolation="bicubic").shape
    TensorShape([224, 224, 3])
    """
    import tensorflow as tf

    from keras_vit._common import to_pair

    out_h, out_w = to_pair(size, "size")
    x = tf.cast(images, tf.float32)
    single = x.shape.rank == 3
    if single:
        x = x[None]
    if crop_pct >= 1.0 and tuple(x.shape[1:3]) == (out_h, out_w):
        return x[0] if single else x
    shape = tf.shape(x)
    height, width = shape[1], shape[2]
    if crop_pct < 1.0:
        side = tf.maximum(tf.cast(tf.cast(tf.minimum(height, width), tf.float32) * crop_pct, tf.int32), 1)
        top, left, window_h, window_w = (height - side) // 2, (width - side) // 2, side, side
    else:
        top, left, window_h, window_w = 0, 0, height, width
    if portable:
        rows = _weights(height, top, window_h, out_h, interpolation)
        cols = _weights(width, left, window_w, out_w, interpolation)
        x = tf.transpose(x, [0, 3, 1, 2])                  # (N, 3, H, W)
        x = tf.matmul(tf.matmul(rows, x), cols, transpose_b=True)
        x = tf.transpose(x, [0, 2, 3, 1])                  # (N, out_h, out_w, 3)
    else:
        if crop_pct < 1.0:
            x = x[:, top:top + window_h, left:left + window_w, :]
        x = tf.image.resize(x, (out_h, out_w), method=interpolation, antialias=True)
    if interpolation == "bicubic":  # the cubic's negative lobes overshoot
        x = tf.clip_by_value(x, 0.0, 255.0)
    x.set_shape([None, out_h, out_w, None])
    return x[0] if single else x


def view_pixels(images: np.ndarray, size: int | Sequence[int], crop_pct: float = 1.0,
                interpolation: str = "bilinear") -> np.ndarray:
    """`model_view` rounded back to uint8 (numpy), for models that take pixels at their size (TFLite)."""
    view = model_view(np.asarray(images), size, crop_pct, interpolation)
    return np.clip(np.round(np.asarray(view)), 0, 255).astype(np.uint8)


__all__ = ["ImageInfo", "inspect", "inspect_many", "check", "decode", "decode_eager", "read_image", "orient",
           "list_images", "model_view", "view_pixels", "view_policy", "max_image_pixels", "MAX_IMAGE_PIXELS",
           "IMAGE_EXTENSIONS"]
