"""Masked patch prediction on CIFAR-10: the paper's self-supervised pre-training (Section 4.6, Appendix B.1.2).

The ViT of recipes/cifar10.py (patch 4, 6 blocks of width 128) pre-trains on the training images
without their labels: half of each image's 64 patch embeddings are corrupted (of those, 80% become a
learnable [mask] embedding, 10% another random patch's embedding, 10% stay as they are) and a linear
head predicts each corrupted patch's mean colour at 3 bits a channel (512 classes) from its output
token. `model.keras` is the encoder, which recipes/cifar10.py fine-tunes:

    keras-vit train recipes/cifar10_mpp.py --set data=../shared/data/cifar10-jpeg.tgz --model-dir runs/mpp
    keras-vit train recipes/cifar10.py --set data=../shared/data/cifar10-jpeg.tgz \\
        --set init=runs/mpp/model.keras --set epochs=30 --model-dir runs/mpp_finetuned

20 epochs here and 30 of fine-tuning spend about what the 50 epochs of recipes/cifar10.py spend
from scratch (the comparison at equal CPU time). Its metrics.json's test_accuracy is the colour
accuracy on the corrupted patches of the test images (objective "mpp"), not a class accuracy.
Crops and flips only: RandAugment's colour operations would only move the targets.

Measured at a smaller equal budget (docs/small-data.md): 6 epochs here + 9 of fine-tuning (2,363 CPU s)
reached 63.0% on the 10,000 test images, 15 epochs from scratch (2,273 CPU s) 63.3%; the pre-training
loss fell every epoch (3.73 to 1.87), 41.8% of the corrupted test patches' colours right.
"""


def get_config():
    return dict(
        data="cifar10",
        image_size=32,
        model=dict(patch_size=4, hidden_size=128, num_layers=6, num_heads=4, mlp_dim=256, classifier="token",
                   drop_path_rate=0.05),
        objective="mpp",
        mpp=dict(corrupt=0.5, mask=0.8, random=0.1, bits=3),
        crop="pad",
        pad=4,
        flip=True,
        randaugment=None,
        optimizer="adamw",
        learning_rate=1e-3,
        weight_decay=0.05,
        schedule="cosine",
        warmup_epochs=1,
        epochs=20,
        batch_size=128,
        validation_split=0.05,  # the same 2,500 images recipes/cifar10.py holds out
        precision="auto",
        seed=0,
    )
