"""The callbacks of a training run: the best model so far, the epoch count and clock (resumes
included), TensorBoard when it is installed."""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import time

import keras

from keras_vit._files import atomic_path

log = logging.getLogger(__name__)


class BestModelCheckpoint(keras.callbacks.Callback):
    """Saves the model with the best `monitor` so far, atomically (never a half-written file).

    `save_target`: the model to save when it is not the one being fit (a distilled student inside
    its `Distiller`, an encoder inside its pre-training wrapper)."""

    def __init__(self, path, monitor="val_accuracy", enabled=True, save_target=None):
        super().__init__()
        self.path = path
        self.monitor = monitor
        self.enabled = enabled
        self.save_target = save_target
        self.best = -math.inf

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None or value <= self.best:
            return
        self.best = float(value)
        if self.enabled:
            with atomic_path(self.path) as tmp:
                (self.save_target or self.model).save(tmp)


class EpochCounter(keras.callbacks.Callback):
    """Remembers the last finished epoch (BackupAndRestore may start fit past epoch 0) and says
    when a run resumes. Adds each epoch's wall and CPU seconds (this process, all threads) to its
    logs, so history.csv holds the cost of every epoch across resumes."""

    def __init__(self, backup_dir=None):
        super().__init__()
        self.backup_dir = backup_dir
        self.first_epoch = None
        self.epochs_completed = 0
        self._started = None

    def on_epoch_begin(self, epoch, logs=None):
        self._started = (time.time(), time.process_time())
        if self.first_epoch is None:
            self.first_epoch = epoch
            self.epochs_completed = epoch
            if epoch:
                print(f"keras-vit train: resuming from epoch {epoch + 1} (backup in {self.backup_dir})", flush=True)

    def on_epoch_end(self, epoch, logs=None):
        self.epochs_completed = epoch + 1
        if logs is not None and self._started is not None:
            logs["epoch_seconds"] = round(time.time() - self._started[0], 1)
            logs["epoch_cpu_seconds"] = round(time.process_time() - self._started[1], 1)


def tensorboard_callback(out_dir, is_chief):
    """The TensorBoard callback when tensorboard is installed; otherwise one line on how to get the logs.

    TensorFlow no longer installs tensorboard, and the logs are a nicety: a run must not fail for them.
    """
    if importlib.util.find_spec("tensorboard") is None:
        if is_chief:
            log.info('TensorBoard logs: off (tensorboard is not installed; pip install "keras-vit[tensorboard]" '
                     "to write them to %s)", os.path.join(out_dir, "logs"))
        return []
    return [keras.callbacks.TensorBoard(os.path.join(out_dir, "logs"), write_graph=False)]
