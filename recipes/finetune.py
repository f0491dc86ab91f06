"""Fine-tune a released checkpoint at a higher resolution, the paper's way (its Appendix B.1.1).

ViT-B/16 pretrained on ImageNet-21k at 224, fine-tuned at 384: position embeddings are
resampled 14x14 -> 24x24 with the official interpolation, the ImageNet-21k head is
replaced by a zero-initialized one, pre-logits are dropped. SGD with momentum 0.9, no
weight decay, gradient clipping at global norm 1, linear warm-up then cosine decay,
batch 512, 10,000 steps (the official CIFAR-10 setting; 500 steps already give ~98.6%).
Inception crops and flips for training, resizing for evaluation.

    keras-vit train recipes/finetune.py --set init_checkpoint=ViT-B_16.npz
    keras-vit train recipes/finetune.py --set model.variant=L/16 --set data=tfds:cifar100
Needs an accelerator for these sizes; on a CPU try --set model.variant=Ti/16 --set image_size=64.

From a timm or transformers checkpoint (DeiT, DINOv2, CLIP, SigLIP, plain ViTs: a folder with
config.json + model.safetensors) the model is the checkpoint's own, at its own size and with its own
pixel mean/std in the data pipeline, and a new head for the data's classes:

    keras-vit train recipes/finetune.py --set weights=FOLDER --set data=FOLDER_OF_PHOTOS
"""


def get_config():
    return dict(
        data="cifar10",
        image_size=384,
        model=dict(variant="B/16", classifier="token", representation_size=None, dropout_rate=0.0),
        init_checkpoint="imagenet21k",  # or a path to an official .npz (ViT-B_16.npz), .keras, .weights.h5
        resample="official",
        crop="inception",
        min_area=0.05,
        flip=True,
        label_smoothing=0.0,
        optimizer="sgd",
        momentum=0.9,
        weight_decay=0.0,
        clip_norm=1.0,
        learning_rate=0.03,
        schedule="cosine",
        warmup_steps=500,
        batch_size=512,
        steps_per_epoch=500,
        epochs=20,  # 10,000 steps
        validation_split=0.02,
        precision="auto",  # bfloat16 where the hardware has it natively, else float32
        seed=0,
    )
