"""Tiny, randomly initialised models built from the real libraries' building blocks, for fast tests.

``build_tiny_sam`` has the signature of segment-anything's registry builders, so a test can register
it (``monkeypatch.setitem(sam_model_registry, "tiny", build_tiny_sam)``) and load a saved tiny
checkpoint through the same path real vit_b/l/h checkpoints take.
"""

from __future__ import annotations

import json
import tempfile
from functools import partial
from pathlib import Path

import torch
from segment_anything.modeling import ImageEncoderViT, MaskDecoder, PromptEncoder, Sam, TwoWayTransformer

TINY_SAM_IMG_SIZE = 64
PATCH_SIZE = 16


def build_tiny_sam(checkpoint: str | None = None, img_size: int = TINY_SAM_IMG_SIZE, embed_dim: int = 32,
                   seed: int = 0) -> Sam:
    """A SAM with SAM's structure and a ~100k-parameter budget; weights from ``checkpoint`` if given."""
    with torch.random.fork_rng():  # a fixed init without disturbing the caller's torch RNG
        torch.manual_seed(seed)
        sam = Sam(
            image_encoder=ImageEncoderViT(
                img_size=img_size, patch_size=PATCH_SIZE, embed_dim=embed_dim, depth=1, num_heads=2,
                mlp_ratio=2.0, out_chans=embed_dim, qkv_bias=True,
                norm_layer=partial(torch.nn.LayerNorm, eps=1e-6), window_size=0, global_attn_indexes=(),
            ),
            prompt_encoder=PromptEncoder(
                embed_dim=embed_dim,
                image_embedding_size=(img_size // PATCH_SIZE, img_size // PATCH_SIZE),
                input_image_size=(img_size, img_size),
                mask_in_chans=4,
            ),
            mask_decoder=MaskDecoder(
                transformer_dim=embed_dim,
                transformer=TwoWayTransformer(depth=1, embedding_dim=embed_dim, mlp_dim=2 * embed_dim, num_heads=2),
                num_multimask_outputs=3,
                iou_head_depth=1,
                iou_head_hidden_dim=16,
            ),
            pixel_mean=[123.675, 116.28, 103.53],
            pixel_std=[58.395, 57.12, 57.375],
        )
    sam.eval()
    if checkpoint is not None:
        with open(checkpoint, "rb") as fh:
            sam.load_state_dict(torch.load(fh, map_location="cpu"))
    return sam


# -- a tiny Stable Diffusion (diffusers folder) ---------------------------------------------------
TINY_TOKENIZER_WORDS = ("a", "the", "of", "in", "on", "at", "one", "single", "photo", "rock", "person",
                        "pedestrians", "railway", "track", "train", "days", "rainy", "sunny", "meters")


def _byte_level_alphabet() -> list[str]:
    """GPT-2/CLIP's printable stand-ins for the 256 byte values (the ByteLevel pre-tokenizer's output)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return [chr(c) for c in codes]


def _write_tiny_bpe_files(folder: Path) -> None:
    """vocab.json + merges.txt: every byte (alone and word-final) so any text tokenizes, plus merges
    that spell a few whole words, so the merge path is exercised too."""
    alphabet = _byte_level_alphabet()
    tokens = alphabet + [symbol + "</w>" for symbol in alphabet]
    merges: list[str] = []
    for word in TINY_TOKENIZER_WORDS:
        symbols = list(word[:-1]) + [word[-1] + "</w>"]
        prefix = symbols[0]
        for symbol in symbols[1:]:
            merge, merged = f"{prefix} {symbol}", prefix + symbol
            if merge not in merges:
                merges.append(merge)
                tokens.append(merged)
            prefix = merged
    tokens = list(dict.fromkeys(tokens)) + ["<|startoftext|>", "<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(tokens)}), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")


def build_tiny_sd_pipeline(folder: Path) -> Path:
    """A Stable-Diffusion-shaped diffusers folder (UNet, VAE, CLIP text encoder + tokenizer, DDIM) with
    random weights, written by save_pretrained; ~7 MB, generates 32x32 images in milliseconds per step."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    folder = Path(folder)
    with tempfile.TemporaryDirectory() as bpe_folder:
        _write_tiny_bpe_files(Path(bpe_folder))
        tokenizer = CLIPTokenizer.from_pretrained(bpe_folder, model_max_length=77)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        unet = UNet2DConditionModel(
            sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=32, attention_head_dim=4, norm_num_groups=8,
        )
        vae = AutoencoderKL(
            in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64), layers_per_block=1,
            down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
            norm_num_groups=8, sample_size=32,
        )
        text_encoder = CLIPTextModel(CLIPTextConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            max_position_embeddings=77, vocab_size=max(1000, len(tokenizer)), projection_dim=32,
            bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        ))
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    pipeline = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                       scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                       requires_safety_checker=False)
    pipeline.save_pretrained(folder)
    return folder
