"""Fashion-MNIST classification: the backbone the seg_fashion recipe starts from.

The 60,000 training items (28x28 grey, 10 classes) from Debian's dataset-fashion-mnist, 5% held out to
pick the best epoch; the 10,000 test items score it. The same ViT as recipes/seg_fashion.py (4x4 patches,
here a 7x7 grid; width 128, 6 blocks) with global average pooling, so its blocks carry over unchanged
to the 64x64 scenes (position embeddings resampled 7x7 -> 16x16). Shifts of up to 2 pixels and flips.

    apt-get install dataset-fashion-mnist    # Debian / Ubuntu: /usr/share/datasets/fashion-mnist
    keras-vit train fashion_items            # then: keras-vit train seg_fashion
"""


def get_config():
    return dict(
        data="fashion_mnist",
        image_size=28,
        model=dict(patch_size=4, hidden_size=128, num_layers=6, num_heads=4, mlp_dim=256, classifier="gap",
                   drop_path_rate=0.05),
        crop="pad",
        pad=2,
        flip=True,
        label_smoothing=0.1,
        optimizer="adamw",
        learning_rate=1e-3,
        weight_decay=0.05,
        schedule="cosine",
        warmup_epochs=0.5,
        epochs=6,
        batch_size=128,
        validation_split=0.05,
        precision="auto",
        seed=0,
    )
