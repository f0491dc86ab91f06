"""The optimizers and learning-rate schedule a recipe names: AdamW (no decay on biases, norms, tokens,
position embeddings) or SGD, after a linear warm-up to the peak."""

from __future__ import annotations

import math

import keras


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak`, then "cosine", "linear" or "constant" down to `end`."""

    def __init__(self, peak, warmup_steps, total_steps, decay="cosine", end=0.0):
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.decay = decay
        self.end = float(end)
        if decay not in ("cosine", "linear", "constant"):
            raise ValueError(f"Unknown schedule {decay!r}; use 'cosine', 'linear' or 'constant'.")

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warm = self.peak * step / max(self.warmup_steps, 1)
        progress = keras.ops.clip((step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1), 0.0, 1.0)
        if self.decay == "cosine":
            decayed = self.end + (self.peak - self.end) * 0.5 * (1.0 + keras.ops.cos(math.pi * progress))
        elif self.decay == "linear":
            decayed = self.peak + (self.end - self.peak) * progress
        else:
            decayed = self.peak + 0.0 * progress
        return keras.ops.where(step < self.warmup_steps, warm, decayed)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps,
                "decay": self.decay, "end": self.end}


# Not decayed, as in the official code: biases, norm scales and offsets, class token, position embeddings
# (and DeiT's distillation token, as timm's no_weight_decay).
NO_DECAY = ["bias", "gamma", "beta", "cls", "pos_embedding", "dist_token"]


def build_optimizer(config, steps_per_epoch):
    total = max(int(config["epochs"] * steps_per_epoch), 1)
    warmup = config["warmup_steps"]
    if warmup is None:
        warmup = int(round(config["warmup_epochs"] * steps_per_epoch))
    schedule = WarmupSchedule(config["learning_rate"], min(warmup, total), total, config["schedule"],
                              config["end_learning_rate"])
    common = dict(learning_rate=schedule, global_clipnorm=config["clip_norm"])
    if config["optimizer"] == "adamw":
        optimizer = keras.optimizers.AdamW(weight_decay=config["weight_decay"], beta_1=config["beta_1"],
                                           beta_2=config["beta_2"], **common)
        optimizer.exclude_from_weight_decay(var_names=NO_DECAY)
    elif config["optimizer"] == "sgd":
        optimizer = keras.optimizers.SGD(momentum=config["momentum"], **common)
    else:
        raise ValueError(f"Unknown optimizer {config['optimizer']!r}; use 'adamw' or 'sgd'.")
    return optimizer

