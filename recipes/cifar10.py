"""ViT from scratch on CIFAR-10 (50,000 train / 10,000 test images of 32x32), sized for a CPU.

4x4 patches make an 8x8 grid of 64 tokens; 6 blocks of width 128 (0.8M parameters);
precision "auto": mixed bfloat16 where the hardware computes it natively (CPUs with
AVX512-BF16 or AMX, about 2x float32; Ampere+ GPUs, TPUs), float32 elsewhere. Reflect-pad
crops and flips, label smoothing, AdamW with warm-up and cosine decay.
RandAugment (2, 5): two random operations per image at magnitude 5 of 10.
On 2 CPU cores with AVX512-BF16, shared with other jobs: about two hours (134 s an epoch),
72.2% test accuracy (saved_models/vit_cifar10), against 70.7% for the same recipe without
RandAugment. That run overfit from about epoch 35 (validation levelled off near 71% while
training accuracy reached 81%); with RandAugment validation trails or ties until epoch ~38,
then leads and still rises slowly at the end (71.7-72.3% over epochs 40-50 against 70.3-71.1%),
with training accuracy at 70% on the augmented images: that points to more epochs, not more
regularization, as the next lever. A heavier mix, RandAugment (2, 9) with mixup 0.2, trailed at
every epoch of a 22-epoch trial (epoch 16: 55.0% against 63.7%). The per-image operations cost
little next to the model here: a batch of 128 took 0.40-0.44 s with them in bfloat16, the run
about as long as without. XLA (`--set jit_compile=True`) made a float32 batch 1.24x faster on
2 AVX2 cores (0.76 against 0.94 s), with the same first-epoch accuracy; in bfloat16 it was slower
on the CPU (benchmarks/PROFILE.md), so it stays off. Without RandAugment: `--set randaugment=None`.

Data: the tfds `cifar10` by default (downloads once), or a local copy:
    keras-vit train recipes/cifar10.py --set data=../shared/data/cifar10-jpeg.tgz
    keras-vit train recipes/cifar10.py --set data=/path/to/cifar10   # <split>/<class>/*.jpg
"""


def get_config():
    return dict(
        data="cifar10",
        image_size=32,
        model=dict(patch_size=4, hidden_size=128, num_layers=6, num_heads=4, mlp_dim=256, classifier="token",
                   drop_path_rate=0.05),
        crop="pad",
        pad=4,
        flip=True,
        randaugment=(2, 5),  # (operations per image, magnitude of 10): 72.2% against 70.7% without
        label_smoothing=0.1,
        optimizer="adamw",
        learning_rate=2e-3,
        weight_decay=0.05,
        schedule="cosine",
        warmup_epochs=1,
        epochs=50,
        batch_size=128,
        validation_split=0.05,  # 2,500 training images pick the best epoch
        precision="auto",  # bfloat16 where the hardware has it natively, else float32
        seed=0,
    )
