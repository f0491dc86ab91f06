"""Stage 1 of the distilled CIFAR-10 ViT that starts from its teacher: inherit the hybrid's Transformer, align the front.

The student is recipes/cifar10_deit.py's (patch 4, width 128, 6 blocks, distillation token). The
teacher, the CIFAR-10 hybrid (saved_models/vit_cifar10_hybrid, 85.8%), runs 4 blocks of the
same width, heads and MLP on the same 8x8 grid of tokens, made by a ResNet stem instead of a
linear patch projection. So the student takes the teacher's 4 blocks as its last 4, its class
token (also as the distillation token), position embeddings, final norm and head (both heads);
its first 2 blocks start as the identity. Then, for 3 epochs, only the student's patch projection,
tokens and first 2 blocks train, to reproduce the teacher's tokens (mean squared error against
the stem's output, on the same augmented images; labels unused). The student ends as a plain ViT
whose front end imitates the stem and whose back is the hybrid's Transformer; stage 2,
recipes/cifar10_deit.py from it, trains all of it on labels and the teacher's hard labels:

    keras-vit train recipes/cifar10_deit_align.py --set data=../shared/data/cifar10-jpeg.tgz --model-dir runs/align
    keras-vit train recipes/cifar10_deit.py --set data=../shared/data/cifar10-jpeg.tgz \\
        --set init=runs/align/model.keras --set epochs=30 --set learning_rate=1e-3 --model-dir runs/deit_aligned

Measured (one run each, 2 AVX512-BF16 cores, on the 10,000 test images): stage 1, 3 epochs, 158 s
wall, 277 CPU s, reproduced 83.4% of the variance of the teacher's tokens on the validation images
and classified 69.5% of the test images before any label; stage 2, 36 epochs, 4,157 s, 7,655 CPU s:
84.0% (saved_models/deit_cifar10). Both: 1.07x the ViT recipe's budget, the teacher's forward passes
included (docs/small-data.md, "Starting from the teacher").
"""


def get_config():
    return dict(
        data="cifar10",
        image_size=32,
        model=dict(patch_size=4, hidden_size=128, num_layers=6, num_heads=4, mlp_dim=256, classifier="token",
                   drop_path_rate=0.05, distillation=True),
        objective="align",
        distill=dict(teacher="saved_models/vit_cifar10_hybrid/model.keras", teacher_precision="float32"),
        crop="pad",
        pad=4,
        flip=True,
        randaugment=(2, 5),
        optimizer="adamw",
        learning_rate=1e-3,
        weight_decay=0.05,
        schedule="cosine",
        warmup_epochs=0.5,
        epochs=3,
        batch_size=128,
        validation_split=0.05,  # the same 2,500 held-out images as stage 2
        precision="auto",
        seed=0,
    )
