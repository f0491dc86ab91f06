"""Checkpoint formats, one module per source: official.py (Google's .npz), timm.py, transformers.py.

Each holds its small table of names (source key <-> keras-vit variable), its config reader and
writer; all load through _assign.py's one plan-then-assign pass (every key and shape checked before
anything is assigned, the model unchanged on error); _torch.py holds what the PyTorch-side formats
share (safetensors, PyTorch layouts, the refusal of pickles). A new family is one new file here.
keras_vit.checkpoints and keras_vit.pretrained dispatch to them.
"""
