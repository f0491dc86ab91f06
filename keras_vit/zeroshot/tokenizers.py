"""The checkpoint's own tokenizer, through the library that defines it, with its zero-shot usage applied.

- CLIP: Hugging Face `tokenizers` on the folder's `tokenizer.json` (byte-level BPE; its normalizer does NFC,
  whitespace cleanup and lower-casing, its post-processor adds <|startoftext|> and <|endoftext|>), truncated to
  the model's length and padded to the longest text of the batch, as CLIP's documented usage
  (`tokenizer(texts, padding=True)`).
- SigLIP: `sentencepiece` on `spiece.model`, after SigLIP's canonicalisation (lower case, punctuation removed,
  runs of whitespace made one space: big_vision's prompt_engineering, transformers' `SiglipTokenizer`), `</s>`
  appended and padded with `</s>` to max_length 64, as SigLIP was trained (`padding="max_length"`): texts padded
  otherwise score far worse (mteb #1424).

No hand-written BPE: the merges and the vocabulary are the libraries' own.
"""

from __future__ import annotations

import os
import re
import string
from typing import Any, Sequence

import numpy as np

from keras_vit._optional import require
from keras_vit.formats._torch import read_json

PADDINGS = ("longest", "max_length")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_SPIECE_UNDERLINE = "\u2581"


def _texts(texts: str | Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        return [texts]
    texts = list(texts)
    bad = [t for t in texts if not isinstance(t, str)]
    if bad:
        raise TypeError(f"texts must be strings, got {type(bad[0]).__name__} {bad[0]!r}.")
    if not texts:
        raise ValueError("no texts given: pass one string or a list of them.")
    return texts


def _pad(rows: list[list[int]], pad_id: int, padding: str, max_length: int) -> np.ndarray:
    width = max_length if padding == "max_length" else max(len(r) for r in rows)
    out = np.full((len(rows), width), pad_id, np.int32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


class TextTokenizer:
    """Texts -> token ids (N, L) int32, as the checkpoint's tokenizer gives them for zero-shot use.

    Attributes:
        padding: "longest" (to the longest text of the call) or "max_length".
        max_length: texts are truncated to this many tokens, the end-of-text token kept.
        pad_token_id, eos_token_id: the ids of the padding and end-of-text tokens.
    """

    def __init__(self, padding: str, max_length: int, pad_token_id: int, eos_token_id: int | None) -> None:
        if padding not in PADDINGS:
            raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}.")
        self.padding, self.max_length = padding, int(max_length)
        self.pad_token_id, self.eos_token_id = int(pad_token_id), eos_token_id

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def __call__(self, texts: str | Sequence[str]) -> np.ndarray:
        return _pad([self.encode(t) for t in _texts(texts)], self.pad_token_id, self.padding, self.max_length)


class BPETokenizer(TextTokenizer):
    """A `tokenizers.Tokenizer` read from `tokenizer.json` (its normalizer, pre-tokenizer, model and
    post-processor as the checkpoint saved them); truncation keeps the special tokens."""

    def __init__(self, path: str, padding: str, max_length: int, pad_token: str, eos_token: str | None) -> None:
        tokenizers = require("tokenizers", "zeroshot", what=f"the tokenizer {path}")
        self.path = path
        self.tokenizer = tokenizers.Tokenizer.from_file(path)
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)
        pad_id = self.tokenizer.token_to_id(pad_token)
        if pad_id is None:
            raise ValueError(f"{path}: the pad token {pad_token!r} (tokenizer_config.json) is not in its vocabulary.")
        eos_id = None if eos_token is None else self.tokenizer.token_to_id(eos_token)
        super().__init__(padding, max_length, pad_id, eos_id)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text).ids)


class SiglipTokenizer(TextTokenizer):
    """SigLIP's sentencepiece tokenizer with its canonicalisation, as transformers' `SiglipTokenizer`
    (lower-casing as `do_lower_case` says)."""

    def __init__(self, path: str, padding: str, max_length: int, pad_token: str, eos_token: str, unk_token: str,
                 lower_case: bool = True) -> None:
        spm = require("sentencepiece", "zeroshot", what=f"the tokenizer {path}")
        self.path = path
        self.sp = spm.SentencePieceProcessor()
        if not self.sp.Load(path):
            raise ValueError(f"{path} is not a sentencepiece model.")
        self.lower_case, self.unk_token = lower_case, unk_token
        ids = {}
        for role, piece in (("pad", pad_token), ("eos", eos_token), ("unk", unk_token)):
            ids[role] = self.sp.piece_to_id(piece)
            if self.sp.id_to_piece(ids[role]) != piece:
                raise ValueError(f"{path}: its {role} token {piece!r} (tokenizer_config.json) is not one of its pieces.")
        self.specials = {pad_token, eos_token, unk_token}
        # transformers encodes "<unk>" + text and drops the pieces of "<unk>": sentencepiece's dummy prefix
        # then never lands on the text itself
        self.unk_length = len(self.sp.encode(unk_token, out_type=str))
        super().__init__(padding, max_length, ids["pad"], ids["eos"])

    def canonicalize(self, text: str) -> str:
        if self.lower_case:
            text = text.lower()
        return re.sub(r"\s+", " ", text.translate(_PUNCTUATION)).strip()

    def encode(self, text: str) -> list[int]:
        text = self.canonicalize(_SPIECE_UNDERLINE + text.replace(_SPIECE_UNDERLINE, " "))
        pieces = self.sp.encode(self.unk_token + text, out_type=str)
        pieces = pieces[self.unk_length:] if len(pieces) >= self.unk_length else pieces
        if len(pieces) > 1 and pieces[0] == _SPIECE_UNDERLINE and pieces[1] in self.specials:
            pieces = pieces[1:]
        ids = [self.sp.piece_to_id(p) for p in pieces][: self.max_length - 1]
        return ids + [self.eos_token_id]


def _token(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def load_tokenizer(folder: str, family: str, model_length: int) -> TextTokenizer:
    """The tokenizer of a two-tower checkpoint folder (`family` "clip" or "siglip"), its length capped at the
    text tower's `model_length` position embeddings; a missing file is named with what writes it."""
    config_path = os.path.join(folder, "tokenizer_config.json")
    config: dict[str, Any] = read_json(config_path) if os.path.exists(config_path) else {}
    limit = config.get("model_max_length")
    max_length = model_length if not isinstance(limit, int) or limit <= 0 else min(int(limit), model_length)
    if family == "clip":
        path = os.path.join(folder, "tokenizer.json")
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"{folder} has no tokenizer.json: CLIP's tokenizer is read from it (transformers' "
                "CLIPTokenizer.save_pretrained(folder) writes it; hub repositories of CLIP have it).")
        return BPETokenizer(path, "longest", max_length, _token(config.get("pad_token")) or "<|endoftext|>",
                            _token(config.get("eos_token")) or "<|endoftext|>")
    path = os.path.join(folder, "spiece.model")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{folder} has no spiece.model: SigLIP's tokenizer is that sentencepiece model (transformers' "
            "SiglipTokenizer.save_pretrained(folder) writes it; google/siglip-* repositories have it).")
    return SiglipTokenizer(path, "max_length", max_length, _token(config.get("pad_token")) or "</s>",
                           _token(config.get("eos_token")) or "</s>", _token(config.get("unk_token")) or "<unk>",
                           bool(config.get("do_lower_case", True)))
