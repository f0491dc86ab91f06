"""TFLite Model Metadata: what MediaPipe Tasks and the TFLite Task Library read from a .tflite file.

The metadata is a flatbuffer of the TFLite metadata schema (tflite-support's
metadata_schema.fbs, file identifier "M001": ModelMetadata -> SubGraphMetadata ->
TensorMetadata), stored in a buffer of the model that the model's `metadata` entry
"TFLITE_METADATA" points to; associated files (the label file) follow the model as an
uncompressed zip archive appended to the file, where those clients look for them.

tflite-support's writer needs protobuf < 4 (not installable beside TensorFlow 2.21) and
MediaPipe's wheel lacks the parts its writer needs, so this module writes the flatbuffer
itself with the `flatbuffers` runtime (a TensorFlow dependency) and repacks the model
with LiteRT's generated schema (`ai_edge_litert.schema_py_generated`, the `export`
extra). `read_metadata` parses it back, for tests and for `keras-vit predict`.

    content = add_metadata(content, name="vit_cifar10", description="...",
                           class_names=["airplane", ...], image_size=(32, 32),
                           input_description="uint8 RGB pixels ...",
                           output_descriptions={"logits": "...", "probabilities": "..."})
    read_metadata(content)["labels"]  # ["airplane", ...]
"""

from __future__ import annotations

import io
import zipfile
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:
    import os

METADATA_NAME = "TFLITE_METADATA"
LABELS_FILE = "labels.txt"
_IDENTIFIER = b"M001"
_MIN_PARSER_VERSION = "1.0.0"  # every field written here is in the schema's 1.0.0

# Enum values of metadata_schema.fbs.
_TENSOR_AXIS_LABELS = 2
_RGB = 1
_IMAGE_PROPERTIES = 2  # ContentProperties union: FeatureProperties 1, ImageProperties 2
_FEATURE_PROPERTIES = 1
_NORMALIZATION_OPTIONS = 1  # ProcessUnitOptions union


def _schema():
    try:
        from ai_edge_litert import schema_py_generated
    except ImportError:
        raise ValueError("writing and reading TFLite metadata needs LiteRT's schema: "
                         "pip install 'keras-vit[export]' (ai-edge-litert).") from None
    return schema_py_generated


# ---------------------------------------------------------------------------------------
# Writing: the metadata flatbuffer, field slots in the schema's declaration order.


class _Writer:
    def __init__(self):
        import flatbuffers

        self.b = flatbuffers.Builder(1024)

    def string(self, text):
        return None if text is None else self.b.CreateString(str(text))

    def offsets(self, items):
        self.b.StartVector(4, len(items), 4)
        for item in reversed(items):
            self.b.PrependUOffsetTRelative(item)
        return self.b.EndVector()

    def floats(self, values):
        self.b.StartVector(4, len(values), 4)
        for value in reversed(values):
            self.b.PrependFloat32(float(value))
        return self.b.EndVector()

    def table(self, fields, count):
        """fields: {slot: ("offset" | "int8" | "uint8" | "uint32", value)}; None values are left out."""
        b = self.b
        b.StartObject(count)
        for slot, (kind, value) in sorted(fields.items()):
            if value is None:
                continue
            if kind == "offset":
                b.PrependUOffsetTRelativeSlot(slot, value, 0)
            elif kind == "int8":
                b.PrependInt8Slot(slot, value, -1)  # default never equal: always stored
            elif kind == "uint8":
                b.PrependUint8Slot(slot, value, 0)
            else:
                b.PrependUint32Slot(slot, value, 0)
        return b.EndObject()

    def associated_file(self, name, description, type):
        # AssociatedFile: name 0, description 1, type 2, locale 3, version 4
        return self.table({0: ("offset", self.string(name)), 1: ("offset", self.string(description)),
                           2: ("int8", type)}, 5)

    def tensor(self, name, description, content=None, process_units=None, stats=None, files=None):
        # TensorMetadata: name 0, description 1, dimension_names 2, content 3, process_units 4,
        # stats 5, associated_files 6
        return self.table({0: ("offset", self.string(name)), 1: ("offset", self.string(description)),
                           3: ("offset", content), 4: ("offset", process_units), 5: ("offset", stats),
                           6: ("offset", files)}, 7)

    def image_content(self, image_size):
        h, w = image_size
        size = self.table({0: ("uint32", int(w)), 1: ("uint32", int(h))}, 2)  # ImageSize: width, height
        properties = self.table({0: ("int8", _RGB), 1: ("offset", size)}, 2)  # color_space, default_size
        # Content: content_properties_type 0, content_properties 1, range 2
        return self.table({0: ("uint8", _IMAGE_PROPERTIES), 1: ("offset", properties)}, 3)

    def feature_content(self):
        properties = self.table({}, 0)
        return self.table({0: ("uint8", _FEATURE_PROPERTIES), 1: ("offset", properties)}, 3)

    def normalization(self, mean, std):
        options = self.table({0: ("offset", self.floats(mean)), 1: ("offset", self.floats(std))}, 2)
        unit = self.table({0: ("uint8", _NORMALIZATION_OPTIONS), 1: ("offset", options)}, 2)  # ProcessUnit
        return self.offsets([unit])

    def stats(self, low, high):
        return self.table({0: ("offset", self.floats(high)), 1: ("offset", self.floats(low))}, 2)  # max, min


def _metadata_flatbuffer(name, description, version, author, license, subgraphs):
    """subgraphs: [{"name", "input": {...}, "outputs": [{"name", "description", "labels"}]}]."""
    w = _Writer()
    subgraph_tables = []
    for sub in subgraphs:
        inp = sub["input"]
        image = w.tensor(
            inp["name"], inp["description"], content=w.image_content(inp["image_size"]),
            process_units=w.normalization(inp["mean"], inp["std"]),
            stats=w.stats([inp["min"]], [inp["max"]]))
        outputs = []
        for out in sub["outputs"]:
            files = None
            if out.get("labels"):
                files = w.offsets([w.associated_file(LABELS_FILE, "the class names, one a line, in the order "
                                                     "of the output's last axis", _TENSOR_AXIS_LABELS)])
            outputs.append(w.tensor(out["name"], out["description"], content=w.feature_content(),
                                    stats=out.get("stats") and w.stats(*out["stats"]), files=files))
        # SubGraphMetadata: name 0, description 1, input_tensor_metadata 2, output_tensor_metadata 3, ...
        subgraph_tables.append(w.table({
            0: ("offset", w.string(sub["name"])), 1: ("offset", w.string(sub.get("description"))),
            2: ("offset", w.offsets([image])), 3: ("offset", w.offsets(outputs))}, 10))
    # ModelMetadata: name 0, description 1, version 2, subgraph_metadata 3, author 4, license 5,
    # associated_files 6, min_parser_version 7
    root = w.table({
        0: ("offset", w.string(name)), 1: ("offset", w.string(description)), 2: ("offset", w.string(version)),
        3: ("offset", w.offsets(subgraph_tables)), 4: ("offset", w.string(author)),
        5: ("offset", w.string(license)), 7: ("offset", w.string(_MIN_PARSER_VERSION))}, 8)
    w.b.Finish(root, file_identifier=_IDENTIFIER)
    return bytes(w.b.Output())


def _split_zip(content):
    """(the flatbuffer, {name: bytes} of an appended zip archive) of a .tflite file's bytes."""
    content = bytes(content)
    try:
        with zipfile.ZipFile(io.BytesIO(content)) as z:
            files = {info.filename: z.read(info) for info in z.infolist()}
            start = min(info.header_offset for info in z.infolist()) if files else len(content)
    except zipfile.BadZipFile:
        return content, {}
    return content[:start], files


def _tensor_names(model):
    """Per subgraph: (its signature key, [name of each of SubGraph.inputs], [... of SubGraph.outputs]),
    the names the signature gives them ("input_i", "output_i" for a subgraph without one)."""
    found = []
    for s in range(model.SubgraphsLength()):
        sub = model.Subgraphs(s)
        key, inputs, outputs = f"subgraph_{s}", {}, {}
        for i in range(model.SignatureDefsLength()):
            signature = model.SignatureDefs(i)
            if signature.SubgraphIndex() == s:
                key = signature.SignatureKey().decode()
                for j in range(signature.InputsLength()):
                    inputs[signature.Inputs(j).TensorIndex()] = signature.Inputs(j).Name().decode()
                for j in range(signature.OutputsLength()):
                    outputs[signature.Outputs(j).TensorIndex()] = signature.Outputs(j).Name().decode()
        found.append((key, [inputs.get(sub.Inputs(k), f"input_{k}") for k in range(sub.InputsLength())],
                      [outputs.get(sub.Outputs(k), f"output_{k}") for k in range(sub.OutputsLength())]))
    return found


def output_tensor_names(content: bytes) -> list[str]:
    """The raw names of every subgraph's output tensors in a .tflite model's bytes (e.g.
    "StatefulPartitionedCall:0"): the names quantization recipes match ops by."""
    model = _schema().Model.GetRootAs(_split_zip(content)[0], 0)
    names = []
    for s in range(model.SubgraphsLength()):
        sub = model.Subgraphs(s)
        names += [sub.Tensors(sub.Outputs(k)).Name().decode() for k in range(sub.OutputsLength())]
    return names


def add_metadata(content: bytes, *, name: str, description: str, class_names: Sequence[str] | None,
                 image_size: Sequence[int], input_description: str, output_descriptions: dict[str, str],
                 mean: Sequence[float] = (0.0,), std: Sequence[float] = (1.0,),
                 pixel_range: tuple[float, float] = (0.0, 255.0), version: str | None = None,
                 author: str | None = None, license: str | None = None) -> bytes:
    """A .tflite model's bytes with TFLite Model Metadata (replacing any it had).

    Every subgraph (one per signature) gets the same description: one image input (RGB,
    `image_size` (h, w), normalization `(x - mean) / std` as a client must apply it
    before feeding the tensor: the default (0, 1) says "feed the raw pixels", for a model
    that takes uint8 and scales inside its graph) and its outputs, named as in the
    signature, each described by `output_descriptions[name]` and labelled by
    `class_names` (the label file `labels.txt`, TENSOR_AXIS_LABELS) when the output has
    one value per class.

    Example:
    >>> content = add_metadata(open("vit.tflite", "rb").read(), name="vit", description="ViT",
    ...                        class_names=["cat", "dog"], image_size=(224, 224),
    ...                        input_description="uint8 RGB", output_descriptions={"probabilities": "softmax"})
    """
    schema = _schema()
    model_bytes, packed = _split_zip(content)
    model = schema.Model.GetRootAs(model_bytes, 0)
    names = _tensor_names(model)
    unknown = sorted({n for _, _, outputs in names for n in outputs} - set(output_descriptions))
    if unknown:
        raise ValueError(f"output_descriptions lacks the model's output(s) {unknown} (has "
                         f"{sorted(output_descriptions)}).")
    classes = None if class_names is None else len(class_names)
    subgraphs = []
    for s, (key, input_names, output_names) in enumerate(names):
        sub = model.Subgraphs(s)
        if len(input_names) != 1:
            raise ValueError(f"{name}: signature {key} takes {len(input_names)} inputs; image classifier metadata "
                             "describes one image input.")
        input_tensor = sub.Tensors(int(sub.Inputs(0)))
        shape = [int(d) for d in input_tensor.ShapeAsNumpy()]
        outputs = []
        for k, out_name in enumerate(output_names):
            tensor = sub.Tensors(int(sub.Outputs(k)))
            tensor_shape = [int(d) for d in tensor.ShapeAsNumpy()]
            per_class = classes is not None and len(tensor_shape) == 2 and tensor_shape[-1] == classes
            outputs.append({"name": out_name, "description": output_descriptions[out_name], "labels": per_class,
                            "stats": ([0.0], [1.0]) if out_name == "probabilities" else None})
        subgraphs.append({
            "name": key,
            "input": {"name": input_names[0], "description": input_description,
                      "image_size": tuple(shape[1:3]) if len(shape) == 4 else tuple(image_size),
                      "mean": list(mean), "std": list(std), "min": pixel_range[0], "max": pixel_range[1]},
            "outputs": outputs})
    metadata = _metadata_flatbuffer(name, description, version, author, license, subgraphs)

    if len(model_bytes) > 2**31 - 2**24:
        raise ValueError(f"{name}: the model is {len(model_bytes) / 2**30:.1f} GiB; TFLite metadata is written into "
                         "a flatbuffer, which holds under 2 GiB.")
    model_t = schema.ModelT.InitFromPackedBuf(bytearray(model_bytes), 0)
    for b in model_t.buffers or []:
        if getattr(b, "offset", 0) > 1:
            # weights stored after the flatbuffer (ai-edge-quantizer writes them so): inlined, as the
            # repacked flatbuffer moves everything
            b.data = np.frombuffer(model_bytes, np.uint8, count=b.size, offset=b.offset)
            b.offset = b.size = 0
    model_t.buffers = [_aligned(b) for b in model_t.buffers or []]
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(metadata, np.uint8)
    entries = [m for m in (model_t.metadata or []) if _text(m.name) != METADATA_NAME]
    model_t.buffers.append(_aligned(buffer))
    entry = schema.MetadataT()
    entry.name, entry.buffer = METADATA_NAME, len(model_t.buffers) - 1
    model_t.metadata = entries + [entry]
    import flatbuffers

    builder = flatbuffers.Builder(len(model_bytes) + len(metadata) + 1024)
    builder.Finish(model_t.Pack(builder), file_identifier=b"TFL3")
    out = io.BytesIO()
    out.write(builder.Output())
    files = {k: v for k, v in packed.items() if k != LABELS_FILE}
    if class_names is not None:
        files[LABELS_FILE] = "".join(f"{c}\n" for c in class_names).encode("utf-8")
    if files:
        # stored, not deflated: MediaPipe reads the files in place from the model's buffer
        with zipfile.ZipFile(out, "a", compression=zipfile.ZIP_STORED) as z:
            for file_name, data in files.items():
                z.writestr(file_name, data)
    return out.getvalue()


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _aligned(buffer):
    """The buffer packed with its data 16-byte aligned, as the converter writes weights (the
    interpreter uses them in place)."""
    class Aligned(type(buffer)):
        def Pack(self, builder):
            data = None
            if self.data is not None and len(self.data):
                values = np.asarray(self.data, np.uint8)
                builder.StartVector(1, len(values), 16)
                builder.head = builder.head - len(values)
                builder.Bytes[builder.head:builder.head + len(values)] = values.tobytes()
                data = builder.EndVector()
            schema = _schema()
            schema.BufferStart(builder)
            if data is not None:
                schema.BufferAddData(builder, data)
            schema.BufferAddOffset(builder, self.offset)
            schema.BufferAddSize(builder, self.size)
            return schema.BufferEnd(builder)

    packed = Aligned()
    packed.__dict__.update(buffer.__dict__)
    return packed


# ---------------------------------------------------------------------------------------
# Reading it back.


class _Table:
    def __init__(self, buf, pos):
        import flatbuffers

        self.t = flatbuffers.table.Table(buf, pos)
        self.flags = flatbuffers.number_types

    def _offset(self, slot):
        return self.t.Offset(4 + 2 * slot)

    def string(self, slot):
        o = self._offset(slot)
        return self.t.String(o + self.t.Pos).decode("utf-8") if o else None

    def int(self, slot, flags="Int8Flags", default=0):
        o = self._offset(slot)
        return self.t.Get(getattr(self.flags, flags), o + self.t.Pos) if o else default

    def table(self, slot):
        o = self._offset(slot)
        return _Table(self.t.Bytes, self.t.Indirect(o + self.t.Pos)) if o else None

    def tables(self, slot):
        o = self._offset(slot)
        if not o:
            return []
        start, n = self.t.Vector(o), self.t.VectorLen(o)
        return [_Table(self.t.Bytes, self.t.Indirect(start + 4 * i)) for i in range(n)]

    def floats(self, slot):
        o = self._offset(slot)
        if not o:
            return None
        start, n = self.t.Vector(o), self.t.VectorLen(o)
        return [float(self.t.Get(self.flags.Float32Flags, start + 4 * i)) for i in range(n)]


def _read_tensor(t):
    tensor = {"name": t.string(0), "description": t.string(1)}
    content = t.table(3)
    if content is not None:
        kind = content.int(0, "Uint8Flags")
        props = content.table(1)
        tensor["content"] = {_IMAGE_PROPERTIES: "image", _FEATURE_PROPERTIES: "feature"}.get(kind, kind)
        if kind == _IMAGE_PROPERTIES and props is not None:
            size = props.table(1)
            tensor["color_space"] = {1: "RGB", 2: "GRAYSCALE"}.get(props.int(0), "UNKNOWN")
            if size is not None:
                tensor["image_size"] = (size.int(1, "Uint32Flags"), size.int(0, "Uint32Flags"))
    for unit in t.tables(4):
        if unit.int(0, "Uint8Flags") == _NORMALIZATION_OPTIONS:
            options = unit.table(1)
            tensor["normalization"] = {"mean": options.floats(0), "std": options.floats(1)}
    stats = t.table(5)
    if stats is not None:
        tensor["stats"] = {"min": stats.floats(1), "max": stats.floats(0)}
    tensor["associated_files"] = [{"name": f.string(0), "description": f.string(1), "type": f.int(2)}
                                  for f in t.tables(6)]
    return tensor


def read_metadata(model: str | os.PathLike | bytes) -> dict[str, Any] | None:
    """The TFLite Model Metadata of a .tflite file (a path or its bytes), as a dict; None without any.

    {"name", "description", "version", "author", "license", "min_parser_version",
    "subgraphs": [{"name", "inputs": [tensor], "outputs": [tensor]}], "files": {name: bytes},
    "labels": [class names] or None}, a tensor {"name", "description", "content" ("image" or
    "feature"), "color_space", "image_size" (h, w), "normalization" {"mean", "std"},
    "stats" {"min", "max"}, "associated_files"}.

    Example:
    >>> meta = read_metadata("vit_cifar10.tflite")
    >>> meta["labels"][:2], [t["name"] for t in meta["subgraphs"][0]["outputs"]]
    (['airplane', 'automobile'], ['logits', 'probabilities'])
    """
    if isinstance(model, (bytes, bytearray, memoryview)):
        content, where = bytes(model), "the model"
    else:
        with open(model, "rb") as f:
            content, where = f.read(), str(model)
    if content[4:8] != b"TFL3":
        raise ValueError(f"{where} is not a TFLite model (no TFL3 flatbuffer identifier).")
    schema = _schema()
    model_bytes, files = _split_zip(content)
    m = schema.Model.GetRootAs(model_bytes, 0)
    data = None
    for i in range(m.MetadataLength()):
        entry = m.Metadata(i)
        if entry.Name().decode() == METADATA_NAME:
            data = m.Buffers(entry.Buffer()).DataAsNumpy().tobytes()
    if data is None:
        return None
    if data[4:8] != _IDENTIFIER:
        raise ValueError(f"{where}: its {METADATA_NAME} buffer is not a metadata flatbuffer (identifier "
                         f"{data[4:8]!r}, expected {_IDENTIFIER!r}).")
    import flatbuffers

    root = _Table(data, flatbuffers.encode.Get(flatbuffers.packer.uoffset, data, 0))
    result = {"name": root.string(0), "description": root.string(1), "version": root.string(2),
              "author": root.string(4), "license": root.string(5), "min_parser_version": root.string(7),
              "subgraphs": [], "files": files, "labels": None}
    for sub in root.tables(3):
        result["subgraphs"].append({"name": sub.string(0), "description": sub.string(1),
                                    "inputs": [_read_tensor(t) for t in sub.tables(2)],
                                    "outputs": [_read_tensor(t) for t in sub.tables(3)]})
    label_files = [f["name"] for s in result["subgraphs"] for t in s["outputs"] for f in t["associated_files"]
                   if f["type"] == _TENSOR_AXIS_LABELS]
    if label_files:
        if label_files[0] not in files:
            raise ValueError(f"{where}: its metadata names the label file {label_files[0]!r}, which is not packed "
                             f"in the model (packed: {sorted(files)}).")
        result["labels"] = files[label_files[0]].decode("utf-8").splitlines()
    return result
