"""Semantic segmentation at laptop scale: Fashion-MNIST items composed into 64x64 scenes.

Each scene holds 1 to 3 items (28x28) at random places that do not overlap; every pixel is labelled
with its item's class + 1 where the item's intensity is above 10% of its maximum, else 0
(background): 11 classes. Training scenes are composed from the training split's items, the test
scenes from the test split's (keras_vit/dense/scenes.py, seeded). A ViT with 4x4 patches (a 16x16 grid
of tokens) and DINOv2's linear head over its last two blocks; rescaled crops (0.75-1.5) and flips of
image and mask together.

The backbone starts from the Fashion-MNIST classifier of recipes/fashion_items.py (the same ViT at
28x28; its position embeddings resampled 7x7 -> 16x16): trained from scratch on the scenes, the same ViT
reached only 0.30 validation mIoU after 4 of 10 epochs (1,200 steps of 64), where telling the items apart
is what it had not learned. Two commands, about 15 and 45 min on 2 CPU cores:

    apt-get install dataset-fashion-mnist    # Debian / Ubuntu: /usr/share/datasets/fashion-mnist
    keras-vit train fashion_items
    keras-vit train seg_fashion              # --set init=None: from scratch
"""


def get_config():
    return dict(
        objective="segmentation",
        data="fashion_scenes",
        image_size=64,
        init_checkpoint="runs/fashion_items/model.keras",
        model=dict(patch_size=4, hidden_size=128, num_layers=6, num_heads=4, mlp_dim=256, classifier="gap",
                   drop_path_rate=0.05),
        dense=dict(head="linear", taps=(5, 6), mode="finetune", min_scale=0.75, max_scale=1.5,
                   scenes_train=20000, scenes_test=2000),
        flip=True,
        optimizer="adamw",
        learning_rate=5e-4,
        weight_decay=0.05,
        schedule="cosine",
        warmup_epochs=0.5,
        epochs=8,
        batch_size=64,
        steps_per_epoch=300,  # 2,400 steps of 64: 153,600 scenes seen
        validation_split=0.05,
        precision="auto",  # bfloat16 where the CPU has it natively: 0.89 s a step against 1.1 s in float32 here
        seed=0,
    )
