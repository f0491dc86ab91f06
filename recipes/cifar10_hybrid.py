"""The paper's hybrid on CIFAR-10 from scratch: a BiT ResNet stem, then a ViT on its feature map.

The paper's answer to small data (Section 3.1, "Hybrid Architecture"): the patches come from a
CNN's feature map, so the Transformer starts from features with the convolutional inductive
bias (locality, translation equivariance). Sized for 32x32 images on a CPU: the stem's
`root="small"` (a 3x3/1 conv, no max-pool, as ResNets for CIFAR) and three stages of
(1, 1, 2) bottleneck units, widths 32/64/128, give an 8x8x512 feature map; 1x1 patches make 64
tokens for 4 blocks of width 128 (1.4M parameters). The stem uses BatchNorm (`norm="batch"`), not
BiT's GroupNorm + weight standardization: from scratch it learns faster (a 4-epoch trial on 11,400
images: 50.8% with BatchNorm and batch 64, 46.2% with GroupNorm and batch 128).
About 2-4x the ViT recipe's compute per image, so 20 epochs where the ViT has 50: on 2 CPU cores
with AVX512-BF16 (XLA on, 394 ms a batch of 64), 98 min wall and 177 min CPU in all, within the
ViT recipe's budget; **84.1% test accuracy** (validation 85.0%, training on augmented images 89.2%).
On a CPU without native bfloat16 (AVX2 only: float32) it is about 4x slower, 1.64 s a batch with
XLA off (1.78 s on: there `--set jit_compile=False`), about 7 hours, and 1.13-1.18x the ViT
recipe's budget; `python benchmarks/recipe_cost.py` measures both recipes on your machine before you start.
The shipped saved_models/vit_cifar10_hybrid (81.8%) was trained by this recipe's previous version
(GroupNorm stem, batch 128, no XLA; `git show 5551dec:recipes/cifar10_hybrid.py`).

Data: the tfds `cifar10` by default (downloads once), or a local copy:
    keras-vit train recipes/cifar10_hybrid.py --set data=../shared/data/cifar10-jpeg.tgz
"""


def get_config():
    return dict(
        data="cifar10",
        image_size=32,
        model=dict(patch_size=1, hidden_size=128, num_layers=4, num_heads=4, mlp_dim=256, classifier="token",
                   resnet=dict(num_layers=(1, 1, 2), width_factor=0.5, root="small", norm="batch")),
        crop="pad",
        pad=4,
        flip=True,
        label_smoothing=0.1,
        optimizer="adamw",
        learning_rate=1e-3,
        weight_decay=0.05,
        schedule="cosine",
        warmup_epochs=1,
        epochs=20,
        batch_size=64,
        jit_compile=True,
        validation_split=0.05,  # 2,500 training images pick the best epoch
        precision="auto",
        seed=0,
    )
