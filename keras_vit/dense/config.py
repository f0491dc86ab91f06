"""DenseHead: every option of a dense-prediction head, checked once.

Three heads share one config: "dpt" (Ranftl et al., 2021: reassemble, fusion, the depth or the
segmentation head), "depth_anything" (Yang et al., 2024: DPT's neck with its own fusion sizes and
depth head, relative or metric) and "linear" (DINOv2's linear protocol: BatchNorm and a 1x1 conv over
the patch maps of one or more blocks). The options are named after transformers' config fields where
they have one (`neck_hidden_sizes`, `reassemble_factors`, `fusion_hidden_size`, ...).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from keras_vit._common import check_keywords, is_int, shown

KINDS = ("dpt", "depth_anything", "linear")
TASKS = ("depth", "segmentation")
READOUTS = ("ignore", "add", "project")  # DPT's use of the class token (Ranftl et al., section 3)
DEPTH_TYPES = ("relative", "metric")
FACTORS = (4, 2, 1, 0.5)


def _check(condition, message):
    if not condition:
        raise ValueError(message)


@dataclasses.dataclass(frozen=True)
class DenseHead:
    """A dense head's architecture.

    Attributes:
        kind: "dpt", "depth_anything" or "linear".
        task: "depth" (one value per pixel, (N, H, W)) or "segmentation" (logits (N, H, W, classes)).
        taps: the backbone stages the head reads: 0 is the embedded tokens (the first block's input),
            i the output of block i (1-based); one per neck stage for DPT heads, one or more for "linear".
        final_norm: each tapped map goes through the backbone's final LayerNorm first (Depth Anything,
            DINOv2's linear protocol); DPT reads the raw block outputs.
        readout: what DPT does with the class token: "ignore" (dropped), "add" (added to every patch
            token), "project" (concatenated to each, then Linear(2D -> D) and GELU).
        neck_hidden_sizes: the channels of each reassembled map.
        reassemble_factors: each map's scale against the patch grid: 4 and 2 (transposed conv), 1, 0.5
            (3x3 conv, stride 2).
        fusion_hidden_size: the channels of the fusion blocks.
        fusion_batch_norm: BatchNorm after each fusion residual conv (DPT-large-ADE), whose bias is then
            absent unless `fusion_bias`.
        fusion_bias: the fusion residual convs' bias (None: the opposite of `fusion_batch_norm`).
        fusion_residual: the fusion blocks' residual connections (the skip around each residual unit);
            switched off only to measure what they do.
        head_hidden_size: the depth head's second conv (Depth Anything's `head_hidden_size`; DPT's is 32).
        depth_type: "relative" (ReLU) or "metric" (sigmoid times `max_depth`), Depth Anything's.
        max_depth: the depth of a sigmoid of 1 (metric), the factor of the ReLU (relative).
        add_projection: DPT's depth head's extra 3x3 conv and ReLU (DPT-hybrid's checkpoints).
        classes: the segmentation classes (None for depth).
        class_names: their names.
        dropout: the segmentation head's dropout.
        linear_batch_norm: the linear head's BatchNorm (DINOv2's BNHead).
        subpixel: the linear head predicts each patch's pixels: every token maps linearly to a
            patch x patch block of outputs (a transposed conv with the patch as kernel and stride, the
            sub-pixel convolution of Shi et al. 2016) instead of one value upsampled bilinearly, so
            boundaries inside a patch can be drawn. Off in DINOv2's protocol.

    Example:
    >>> head = DenseHead(kind="dpt", task="segmentation", taps=(1, 2, 3, 4), classes=5)
    >>> head.readout, head.fusion_hidden_size
    ('project', 256)
    """

    kind: str = "dpt"
    task: str = "depth"
    taps: tuple[int, ...] = (3, 6, 9, 12)
    final_norm: bool = False
    readout: str = "project"
    neck_hidden_sizes: tuple[int, ...] = (96, 192, 384, 768)
    reassemble_factors: tuple[float, ...] = (4, 2, 1, 0.5)
    fusion_hidden_size: int = 256
    fusion_batch_norm: bool = False
    fusion_bias: bool | None = None
    fusion_residual: bool = True
    head_hidden_size: int = 32
    depth_type: str = "relative"
    max_depth: float = 1.0
    add_projection: bool = False
    classes: int | None = None
    class_names: tuple[str, ...] | None = None
    dropout: float = 0.1
    linear_batch_norm: bool = True
    subpixel: bool = False

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        _check(self.kind in KINDS, f"DenseHead: kind={shown(self.kind)}; use one of {KINDS}.")
        _check(self.task in TASKS, f"DenseHead: task={shown(self.task)}; use one of {TASKS}.")
        _check(isinstance(self.taps, (list, tuple)) and self.taps and all(is_int(t) and 0 <= t <= 4096
                                                                          for t in self.taps),
               f"DenseHead: taps={shown(self.taps)} must be stage numbers (0 = the embeddings, i = block i).")
        set_("taps", tuple(int(t) for t in self.taps))
        _check(self.readout in READOUTS, f"DenseHead: readout={shown(self.readout)}; use one of {READOUTS}.")
        for name in ("neck_hidden_sizes", "reassemble_factors"):
            value = getattr(self, name)
            _check(isinstance(value, (list, tuple)), f"DenseHead: {name}={shown(value)} must be a list.")
            set_(name, tuple(value))
        _check(all(is_int(n) and 0 < n <= 2**16 for n in self.neck_hidden_sizes),
               f"DenseHead: neck_hidden_sizes={shown(self.neck_hidden_sizes)} must be positive channel counts.")
        _check(all(f in FACTORS for f in self.reassemble_factors),
               f"DenseHead: reassemble_factors={shown(self.reassemble_factors)}; each is one of {FACTORS}.")
        set_("reassemble_factors", tuple(int(f) if f >= 1 else float(f) for f in self.reassemble_factors))
        if self.kind != "linear":
            _check(len(self.taps) == len(self.neck_hidden_sizes) == len(self.reassemble_factors),
                   f"DenseHead: a {self.kind} neck has one stage per tap: taps={self.taps}, neck_hidden_sizes="
                   f"{self.neck_hidden_sizes}, reassemble_factors={self.reassemble_factors} differ in length.")
        for name in ("fusion_hidden_size", "head_hidden_size"):
            value = getattr(self, name)
            _check(is_int(value) and 0 < value <= 2**16, f"DenseHead: {name}={shown(value)} must be a positive int.")
        _check(self.kind == "linear" or self.fusion_hidden_size >= 2,
               f"DenseHead: fusion_hidden_size={self.fusion_hidden_size}; the depth head halves it.")
        _check(self.depth_type in DEPTH_TYPES, f"DenseHead: depth_type={shown(self.depth_type)}; use {DEPTH_TYPES}.")
        _check(isinstance(self.max_depth, (int, float)) and not isinstance(self.max_depth, bool)
               and 0 < self.max_depth < 1e30, f"DenseHead: max_depth={shown(self.max_depth)} must be positive.")
        set_("max_depth", float(self.max_depth))
        _check(isinstance(self.dropout, (int, float)) and 0 <= self.dropout < 1,
               f"DenseHead: dropout={shown(self.dropout)} must be in [0, 1).")
        if self.task == "segmentation":
            _check(is_int(self.classes) and 0 < int(self.classes or 0) <= 2**16,
                   f"DenseHead: task='segmentation' needs classes (a positive int), got {shown(self.classes)}.")
            if self.class_names is not None:
                names = tuple(str(n) for n in self.class_names)
                _check(len(names) == self.classes,
                       f"DenseHead: {len(names)} class_names for classes={self.classes}.")
                set_("class_names", names)
        else:
            _check(self.classes is None, f"DenseHead: task='depth' has no classes (got {shown(self.classes)}).")
        _check(not (self.kind == "depth_anything" and self.task != "depth"),
               "DenseHead: kind='depth_anything' is a depth head; use kind='dpt' for segmentation.")
        for name in ("final_norm", "fusion_batch_norm", "fusion_residual", "add_projection", "linear_batch_norm",
                     "subpixel"):
            _check(isinstance(getattr(self, name), bool), f"DenseHead: {name}={shown(getattr(self, name))} must "
                   "be True or False.")
        _check(not (self.subpixel and self.kind != "linear"),
               f"DenseHead: subpixel=True is an option of the linear head; kind={shown(self.kind)} upsamples "
               "through its own fusion blocks (use kind='linear', or subpixel=False).")
        _check(self.fusion_bias is None or isinstance(self.fusion_bias, bool),
               f"DenseHead: fusion_bias={shown(self.fusion_bias)} must be True, False or None.")

    @property
    def fusion_uses_bias(self) -> bool:
        return (not self.fusion_batch_norm) if self.fusion_bias is None else self.fusion_bias

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values: `DenseHead(**head.to_dict()) == head`."""
        out = dataclasses.asdict(self)
        for name, value in out.items():
            if isinstance(value, tuple):
                out[name] = list(value)
        return out

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> DenseHead:
        check_keywords(fields, {f.name for f in dataclasses.fields(cls)}, "DenseHead")
        return cls(**fields)


_dataclass_init = DenseHead.__init__


@functools.wraps(_dataclass_init)
def _checked_init(self: DenseHead, *args: Any, **kwargs: Any) -> None:
    # a misspelled option is refused naming the nearest field, not by the dataclass' bare TypeError
    check_keywords(kwargs, {f.name for f in dataclasses.fields(DenseHead)}, "DenseHead")
    _dataclass_init(self, *args, **kwargs)


DenseHead.__init__ = _checked_init  # type: ignore[method-assign]
