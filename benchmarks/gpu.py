"""GPU throughput of the two model stages: SAM ViT-H (cut-outs) and Stable Diffusion 1.5 (rare obstacles).

    python benchmarks/gpu.py              # on a CUDA machine; sized to finish well inside 4 minutes on an H200
    python benchmarks/gpu.py --dry-run    # on CPU: the same code paths at tiny sizes (about a minute, 2 cores)

Random weights, built from the architectures' configs in code: nothing is downloaded, and speed
hardly depends on weight values. Prints one table:
1. SAM image encoder, 1024x1024 inputs, batch 1-16: embeddings/s;
2. SAM prompt encoder + mask decoder on one image's embedding, 1-64 box prompts per call: prompts/s;
3. SD 1.5 (UNet, VAE, CLIP ViT-L/14 text encoder), fp16, 512x512, 25 steps, guidance 7.5, batch 1
   and 4: images/s for the whole pipeline, and one UNet step (guidance doubles its batch) on its own;
each with FLOP/s (FlopCounterMode, counted once per configuration) against the device's dense
bf16/fp16 peak from a table and against a measured large bf16 matmul.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import torch
from torch.utils.flop_counter import FlopCounterMode

# Dense (no sparsity) bf16/fp16 tensor-core peaks, TFLOP/s, from the vendor's data sheets; the first
# name found in torch.cuda.get_device_name() wins, so the more specific names come first.
DENSE_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.0), ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("A100", 312.0),
    ("L40S", 362.0), ("L40", 181.0), ("L4", 121.0), ("A10G", 70.0), ("A10", 125.0), ("RTX 4090", 165.0),
    ("V100", 125.0),
)

# Stable Diffusion 1.5's published configs (unet/, vae/, text_encoder/ of the release), written out.
SD15_UNET = dict(
    sample_size=64, in_channels=4, out_channels=4, center_input_sample=False, flip_sin_to_cos=True, freq_shift=0,
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    block_out_channels=(320, 640, 1280, 1280), layers_per_block=2, downsample_padding=1, mid_block_scale_factor=1,
    act_fn="silu", norm_num_groups=32, norm_eps=1e-5, cross_attention_dim=768, attention_head_dim=8,
)
SD15_VAE = dict(
    in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(128, 256, 512, 512), layers_per_block=2,
    act_fn="silu", latent_channels=4, norm_num_groups=32, sample_size=512, scaling_factor=0.18215,
)
CLIP_VIT_L14_TEXT = dict(
    vocab_size=49408, hidden_size=768, intermediate_size=3072, projection_dim=768, num_hidden_layers=12,
    num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu", layer_norm_eps=1e-5,
)
SD15_SCHEDULER = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
                      set_alpha_to_one=False, skip_prk_steps=True, steps_offset=1)
TEXT_TOKENS = 77
GUIDANCE = 7.5


@dataclass(frozen=True)
class Plan:
    """What one run measures, and how long it times each configuration."""

    device: torch.device
    sam_variant: str  # "vit_h", or "vit_b@<px>" (vit_b's layers at a small input) for the CPU dry run
    sam_image_batches: tuple[int, ...]
    sam_prompt_counts: tuple[int, ...]
    sd_dtype: torch.dtype
    sd_size: int
    sd_steps: int
    sd_batches: tuple[int, ...]
    matmul_n: int
    warmup_calls: int
    min_timed_seconds: float


GPU_PLAN = Plan(device=torch.device("cuda"), sam_variant="vit_h", sam_image_batches=(1, 2, 4, 8, 16),
                sam_prompt_counts=(1, 2, 4, 8, 16, 64), sd_dtype=torch.float16, sd_size=512, sd_steps=25,
                sd_batches=(1, 4), matmul_n=8192, warmup_calls=2, min_timed_seconds=1.0)
DRY_PLAN = Plan(device=torch.device("cpu"), sam_variant="vit_b@128", sam_image_batches=(2,),
                sam_prompt_counts=(1, 64), sd_dtype=torch.float32, sd_size=64, sd_steps=1, sd_batches=(1,),
                matmul_n=1024, warmup_calls=0, min_timed_seconds=0.0)


@dataclass(frozen=True)
class Result:
    stage: str
    config: str
    precision: str
    items_per_call: int
    unit: str  # what an item is: "images", "prompts", "steps"
    seconds_per_call: float
    flops_per_call: float

    @property
    def items_per_second(self) -> float:
        return self.items_per_call / self.seconds_per_call

    @property
    def flops_per_second(self) -> float:
        return self.flops_per_call / self.seconds_per_call


# -- measuring ----------------------------------------------------------------------------------
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(fn: Callable[[], object], plan: Plan) -> float:
    """Mean wall time of ``fn`` after warm-up, over enough calls to fill min_timed_seconds (one call
    when it fills them alone)."""
    for _ in range(plan.warmup_calls):
        fn()
    synchronize(plan.device)
    started = time.perf_counter()
    fn()
    synchronize(plan.device)
    first = time.perf_counter() - started
    if first >= plan.min_timed_seconds:
        return first
    calls = math.ceil(plan.min_timed_seconds / first)
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(plan.device)
    return (time.perf_counter() - started) / calls


def count_flops(fn: Callable[[], object]) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def working_autocast(device: torch.device, probe: Callable[[], torch.Tensor]) -> torch.dtype | None:
    """bf16, else fp16 autocast if ``probe`` runs under it and gives finite numbers; None means fp32."""
    if device.type != "cuda":
        return None
    for dtype in (torch.bfloat16, torch.float16):
        try:
            with autocast(device, dtype):
                if torch.isfinite(probe()).all():
                    return dtype
        except RuntimeError as exc:
            print(f"  autocast {dtype} failed ({exc}); trying the next precision")
    return None


def precision_name(dtype: torch.dtype | None) -> str:
    return {None: "fp32", torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


@torch.inference_mode()
def measured_matmul(plan: Plan) -> Result:
    dtype = torch.bfloat16 if plan.device.type == "cuda" else torch.float32
    a = torch.randn(plan.matmul_n, plan.matmul_n, device=plan.device, dtype=dtype)
    b = torch.randn(plan.matmul_n, plan.matmul_n, device=plan.device, dtype=dtype)
    seconds = seconds_per_call(lambda: torch.matmul(a, b), plan)
    return Result("matmul", f"{plan.matmul_n}^3", precision_name(dtype), 1, "matmuls", seconds,
                  2.0 * plan.matmul_n ** 3)


# -- SAM ----------------------------------------------------------------------------------------
def build_sam(plan: Plan) -> torch.nn.Module:
    from segment_anything import sam_model_registry

    with torch.device(plan.device):  # random init on the GPU: seconds, not a minute on the CPU
        if plan.sam_variant.startswith("vit_b@"):
            sam = small_vit_b_sam(int(plan.sam_variant.removeprefix("vit_b@")))
        else:
            sam = sam_model_registry[plan.sam_variant](checkpoint=None)
    return sam.to(plan.device).eval()


def small_vit_b_sam(image_size: int) -> torch.nn.Module:
    """SAM vit_b's layers at a smaller input (the registry fixes 1024 px), so a CPU can run it in seconds."""
    from segment_anything.modeling import ImageEncoderViT, MaskDecoder, PromptEncoder, Sam, TwoWayTransformer

    grid = image_size // 16
    return Sam(
        image_encoder=ImageEncoderViT(
            img_size=image_size, patch_size=16, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4,
            norm_layer=partial(torch.nn.LayerNorm, eps=1e-6), qkv_bias=True, use_rel_pos=True,
            global_attn_indexes=(2, 5, 8, 11), window_size=14, out_chans=256),
        prompt_encoder=PromptEncoder(embed_dim=256, image_embedding_size=(grid, grid),
                                     input_image_size=(image_size, image_size), mask_in_chans=16),
        mask_decoder=MaskDecoder(num_multimask_outputs=3, transformer_dim=256, iou_head_depth=3,
                                 iou_head_hidden_dim=256,
                                 transformer=TwoWayTransformer(depth=2, embedding_dim=256, mlp_dim=2048, num_heads=8)),
        pixel_mean=[123.675, 116.28, 103.53], pixel_std=[58.395, 57.12, 57.375],
    )


@torch.inference_mode()
def bench_sam(plan: Plan) -> list[Result]:
    sam = build_sam(plan)
    size = sam.image_encoder.img_size
    print(f"  SAM {plan.sam_variant}: {sum(p.numel() for p in sam.parameters()) / 1e6:.0f} M parameters, "
          f"{size}x{size} inputs")
    images = torch.randn(max(plan.sam_image_batches), 3, size, size, device=plan.device)
    amp = working_autocast(plan.device, lambda: sam.image_encoder(images[:1]))
    results = []
    for batch in plan.sam_image_batches:
        def encode(batch: int = batch) -> torch.Tensor:
            with autocast(plan.device, amp):
                return sam.image_encoder(images[:batch])
        results.append(Result("SAM image encoder", f"batch {batch}", precision_name(amp), batch, "images",
                              seconds_per_call(encode, plan), count_flops(encode)))

    with autocast(plan.device, amp):
        embedding = sam.image_encoder(images[:1])
        dense_pe = sam.prompt_encoder.get_dense_pe()
    generator = torch.Generator(plan.device).manual_seed(0)
    for count in plan.sam_prompt_counts:
        corners = torch.rand(count, 2, 2, device=plan.device, generator=generator) * size
        boxes = torch.cat([corners.amin(dim=1), corners.amax(dim=1)], dim=1)  # x0 y0 x1 y1

        def decode(boxes: torch.Tensor = boxes) -> torch.Tensor:
            with autocast(plan.device, amp):
                sparse, dense = sam.prompt_encoder(points=None, boxes=boxes, masks=None)
                masks, _ = sam.mask_decoder(image_embeddings=embedding, image_pe=dense_pe,
                                            sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
                                            multimask_output=False)
                return masks
        results.append(Result("SAM prompt enc + mask dec", f"{count} box prompts, 1 image", precision_name(amp), count,
                              "prompts", seconds_per_call(decode, plan), count_flops(decode)))
    return results


# -- Stable Diffusion 1.5 -----------------------------------------------------------------------
def build_sd15(plan: Plan):
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from diffusers.utils import logging as diffusers_logging
    from transformers import CLIPTextConfig, CLIPTextModel

    diffusers_logging.set_verbosity_error()  # its advice on from_pretrained dtypes does not apply to random weights

    with torch.device(plan.device):
        unet = UNet2DConditionModel(**SD15_UNET)
        vae = AutoencoderKL(**SD15_VAE)
        text_encoder = CLIPTextModel(CLIPTextConfig(**CLIP_VIT_L14_TEXT))
    # no tokenizer: prompts arrive as token ids (random), and their embeddings go in directly
    pipeline = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=None, unet=unet,
                                       scheduler=PNDMScheduler(**SD15_SCHEDULER), safety_checker=None,
                                       feature_extractor=None, requires_safety_checker=False)
    pipeline.set_progress_bar_config(disable=True)
    return pipeline.to(plan.device, plan.sd_dtype)


@torch.inference_mode()
def bench_sd15(plan: Plan) -> list[Result]:
    pipeline = build_sd15(plan)
    unet, text_encoder = pipeline.unet, pipeline.text_encoder
    print(f"  SD 1.5: UNet {sum(p.numel() for p in unet.parameters()) / 1e6:.0f} M, VAE "
          f"{sum(p.numel() for p in pipeline.vae.parameters()) / 1e6:.0f} M, text encoder "
          f"{sum(p.numel() for p in text_encoder.parameters()) / 1e6:.0f} M parameters")
    precision, latent = precision_name(plan.sd_dtype), plan.sd_size // 8
    results = []
    for batch in plan.sd_batches:
        token_ids = torch.randint(0, CLIP_VIT_L14_TEXT["vocab_size"], (2, batch, TEXT_TOKENS), device=plan.device)

        def generate(token_ids: torch.Tensor = token_ids) -> object:
            return pipeline(prompt_embeds=text_encoder(token_ids[0])[0],
                            negative_prompt_embeds=text_encoder(token_ids[1])[0],
                            num_inference_steps=plan.sd_steps, guidance_scale=GUIDANCE,
                            height=plan.sd_size, width=plan.sd_size, output_type="np")
        config = f"batch {batch}, {plan.sd_size}px, {plan.sd_steps} steps"
        results.append(Result("SD 1.5 pipeline", config, precision, batch, "images",
                              seconds_per_call(generate, plan), count_flops(generate)))

        # the denoising loop alone: guidance doubles the UNet's batch
        latents = torch.randn(2 * batch, 4, latent, latent, device=plan.device, dtype=plan.sd_dtype)
        context = torch.randn(2 * batch, TEXT_TOKENS, SD15_UNET["cross_attention_dim"], device=plan.device,
                              dtype=plan.sd_dtype)
        timestep = torch.tensor(500, device=plan.device)

        def denoise_step(latents: torch.Tensor = latents, timestep: torch.Tensor = timestep,
                         context: torch.Tensor = context) -> torch.Tensor:
            return unet(latents, timestep, encoder_hidden_states=context).sample
        results.append(Result("SD 1.5 UNet step", f"batch {batch} (x2 guidance), {plan.sd_size}px", precision,
                              1, "steps", seconds_per_call(denoise_step, plan), count_flops(denoise_step)))
    return results


# -- reporting ----------------------------------------------------------------------------------
def table_peak_tflops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in DENSE_PEAK_TFLOPS if key in name), None)


def print_environment(device: torch.device) -> None:
    import diffusers
    import transformers

    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
          f"diffusers {diffusers.__version__}, transformers {transformers.__version__}")
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        print(f"device: {props.name}, {props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs, "
              f"compute capability {props.major}.{props.minor}")
    else:
        print(f"device: CPU ({torch.get_num_threads()} threads) -- dry run, the numbers mean nothing")


def percent(value: float, peak_tflops: float | None) -> str:
    return f"{100 * value / (peak_tflops * 1e12):5.1f}%" if peak_tflops else "    -"


def print_table(results: list[Result], table_peak: float | None, matmul: Result) -> None:
    matmul_peak = matmul.flops_per_second / 1e12
    header = (f"{'stage':<26} {'configuration':<30} {'prec':<5} {'items/s':>10} {'unit':<8} {'GFLOP/item':>11} "
              f"{'TFLOP/s':>8} {'%peak':>6} {'%mm':>6}")
    print("\n" + header + "\n" + "-" * len(header))
    for r in results:
        print(f"{r.stage:<26} {r.config:<30} {r.precision:<5} {r.items_per_second:>10.2f} {r.unit:<8} "
              f"{r.flops_per_call / r.items_per_call / 1e9:>11.1f} {r.flops_per_second / 1e12:>8.1f} "
              f"{percent(r.flops_per_second, table_peak):>6} {percent(r.flops_per_second, matmul_peak):>6}")
    peak_text = f"{table_peak:.0f} TFLOP/s dense bf16/fp16 (data sheet)" if table_peak else "not in the table"
    print(f"\n%peak: of the device's {peak_text}; %mm: of the measured {matmul.precision} matmul "
          f"({matmul_peak:.1f} TFLOP/s). FLOPs: torch FlopCounterMode (matmuls, convolutions, attention).")


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    started = time.perf_counter()
    print(f"{name} ...", flush=True)
    yield
    print(f"  done in {time.perf_counter() - started:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="run every code path on CPU at tiny sizes")
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device: nothing to benchmark (python benchmarks/gpu.py --dry-run checks the script on CPU)")
        return 1
    plan = DRY_PLAN if args.dry_run else GPU_PLAN
    print_environment(plan.device)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True  # fixed shapes per configuration: let cuDNN pick its fastest convs
    torch.backends.cuda.matmul.allow_tf32 = True  # if autocast is refused, fp32 runs on tensor cores
    with stage("bf16 matmul reference"):
        matmul = measured_matmul(plan)
    results = [matmul]
    with stage("SAM"):
        results += bench_sam(plan)
    if plan.device.type == "cuda":
        torch.cuda.empty_cache()
    with stage("Stable Diffusion 1.5"):
        results += bench_sd15(plan)
    print_table(results, table_peak_tflops(plan.device), matmul)
    return 0


if __name__ == "__main__":
    sys.exit(main())
