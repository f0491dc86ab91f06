"""Pre-train ViT-B/16 from scratch, the paper's setup (Section 4.1, Table 3) for TPU/GPU users.

Adam (beta1 0.9, beta2 0.999) with decoupled weight decay 0.1 (AdamW: biases, norms, class
token and position embeddings are not decayed), batch 4096, 10k linear warm-up steps then
linear decay, dropout 0.1, gradient clipping at global norm 1, 224x224 Inception crops and
flips; 90 epochs. The data streams from tfds: `imagenet2012` needs its archives downloaded
by hand (see the tfds catalog); an ImageNet-21k build works the same with --set data=tfds:NAME.

    keras-vit train recipes/pretrain_imagenet21k.py --model-dir gs://bucket/vit-b16   # TPU
    TF_CONFIG=... keras-vit train recipes/pretrain_imagenet21k.py                      # several machines
"""


def get_config():
    return dict(
        data="tfds:imagenet2012",
        train_split="train",
        test_split="validation",
        validation_split=0.01,
        image_size=224,
        model=dict(variant="B/16", classifier="token", representation_size=768, dropout_rate=0.1),
        crop="inception",
        min_area=0.05,
        flip=True,
        optimizer="adamw",
        learning_rate=1e-3,
        beta_1=0.9,
        beta_2=0.999,
        weight_decay=0.1,
        clip_norm=1.0,
        schedule="linear",
        warmup_steps=10_000,
        end_learning_rate=1e-5,
        batch_size=4096,
        epochs=90,
        eval_crop_fraction=0.875,
        precision="auto",  # bfloat16 where the hardware has it natively, else float32
        seed=0,
    )
