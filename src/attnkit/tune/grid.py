"""The shape buckets ``attnkit tune`` measures (data), and the buckets of given models.

A grid is static shapes (heads, head dims, dtypes: what a model fixes) times runtime shapes
(batch and lengths: what each step varies). The GPU grids hold the shapes of
benchmarks/bench_triton.py and bench_mla.py (Llama-3-8B-like 32/8 heads, d64/d128/d256;
DeepSeek-V3 MLA at 16 and 128 heads), so the planner's nearest bucket for those rows is exact,
and DeepSeek-V3.2's sparse attention (128 heads, top-k 2048, indexer 64 x 128: its own buckets,
since a DSA step's work is not a dense one's);
``--quick`` keeps the rows that decide each phase's choice. The CPU grid is tiny: it tests the
code path end to end and makes a smoke profile.

The varlen buckets time the varlen call (packed non-causal sequences, no KV cache) at DiT
shapes: they measure the kernel variants of that call (the plan's varlen kernel table).
Every bucket is measured at the planner's default page size; the GPU grids' MLA decode buckets
also at 64 keys a page, where triton_mla runs another kernel (its Hopper decode kernel needs
pages of a multiple of 64), so the page size rule can compare the two (planning/page_gain.py).
A backend that does not accept a bucket's page size is not measured there (run.serving).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from attnkit.planning.measured import model_shape
from attnkit.planning.pages import DEFAULT_PAGE_SIZE
from attnkit.planning.profile import Bucket, Shape

PAGE_SIZE = DEFAULT_PAGE_SIZE       # the planner's default page size, for every bucket
MLA_DECODE_PAGES = (PAGE_SIZE, 64)  # MLA decode on the GPU: also 64-key pages (triton_mla's ws kernel)


@dataclass(frozen=True)
class Runtime:
    """Runtime shapes of one phase: decode (batch, context) pairs or prefill (new, prefix, batch);
    ``decode_pages``: the page sizes the decode pairs are measured at (prefill: PAGE_SIZE);
    ``varlen``: (sequences, tokens each) of the varlen call (non-causal, no KV cache)."""
    decode: tuple[tuple[int, int], ...]
    prefill: tuple[tuple[int, int, int], ...]
    decode_pages: tuple[int, ...] = (PAGE_SIZE,)
    varlen: tuple[tuple[int, int], ...] = ()


def _mha(heads, kv, dim, dtype="bf16", kv_dtype=None) -> Shape:
    return Shape("mha", heads, kv, dim, dim, dtype, kv_dtype or dtype)


def _mla(heads, *, rank=512, rope=64, nope=128, v=128, dtype="bf16", kv_dtype=None) -> Shape:
    return Shape("mla", heads, 1, nope + rope, v, dtype, kv_dtype or dtype, rank, rope)


def _dsa(heads, *, topk=2048, index_heads=64, index_dim=128, **mla) -> Shape:
    """A DeepSeek sparse attention layer (DeepSeek-V3.2: top-k 2048, indexer 64 x 128)."""
    return replace(_mla(heads, **mla), topk=topk, index_heads=index_heads, index_dim=index_dim)


def _grid(decode_b, decode_ctx, prefill, pages=(PAGE_SIZE,)) -> Runtime:
    return Runtime(tuple((b, c) for b in decode_b for c in decode_ctx), tuple(prefill), pages)


# prefill (new, prefix, batch): fresh prefills, extends over a prefix, and small extends of a
# batch (speculative verify, chunked-prefill tails) where a kernel that copies every key loses
MHA_MAIN = _grid((1, 16, 64, 128), (256, 1024, 4096, 32768),
                 [(2048, 0, 1), (16384, 0, 1), (2048, 0, 8), (2048, 8192, 1), (2048, 32768, 1),
                  (16, 4096, 16)])
MHA_SIDE = Runtime(((64, 4096), (1, 32768)), ((16384, 0, 1), (2048, 32768, 1)))
FP8_SIDE = Runtime(((1, 32768), (64, 4096)), ())
MLA_MAIN = _grid((1, 32, 128), (1024, 4096, 32768), [(2048, 32768, 1), (4096, 0, 1), (16, 4096, 32)],
                 MLA_DECODE_PAGES)
MLA_FP8 = Runtime(((128, 4096),), (), MLA_DECODE_PAGES)
QUICK_MHA = _grid((1, 64), (4096, 32768), [(16384, 0, 1), (2048, 32768, 1)])
QUICK_MLA = Runtime(((128, 4096),), ((2048, 32768, 1),), MLA_DECODE_PAGES)
QUICK_MLA_SMALL = Runtime(((128, 4096),), (), MLA_DECODE_PAGES)
# DSA: contexts from 8k (top-k a quarter of them) to 32k; prefill over a long prefix and fresh
# (decode at 16- and 64-key pages too: FlashMLA's sparse kernels page by 64)
DSA_MAIN = _grid((1, 32, 64, 128), (8192, 32768), [(2048, 32768, 1), (4096, 0, 1)], MLA_DECODE_PAGES)
QUICK_DSA = Runtime(((64, 32768),), ((2048, 32768, 1),), MLA_DECODE_PAGES)

# The varlen call at DiT shapes (B = 1, bf16, d128; docs/models.md's pipeline presets): FLUX.1
# 1024^2 joint attention 4,608 x 24 heads (and 4 of them: a batch of images), HunyuanVideo 720p
# 119,056 x 24, Wan2.1 480p / 720p 32,760 / 75,600 x 40
VARLEN_DIT: tuple[tuple[Shape, Runtime], ...] = (
    (_mha(24, 24, 128), Runtime((), (), varlen=((1, 4608), (4, 4608), (1, 119056)))),
    (_mha(40, 40, 128), Runtime((), (), varlen=((1, 32760), (1, 75600)))),
)
GPU_FULL: tuple[tuple[Shape, Runtime], ...] = (
    (_mha(32, 8, 128), MHA_MAIN),
    (_mha(32, 8, 64), MHA_SIDE),
    (_mha(16, 8, 256), MHA_SIDE),
    (_mha(32, 8, 128, kv_dtype="fp8_e4m3"), FP8_SIDE),
    (_mla(128), MLA_MAIN),
    (_mla(16), MLA_MAIN),
    (_mla(128, kv_dtype="fp8_e4m3"), MLA_FP8),
    (_mla(16, kv_dtype="fp8_e4m3"), MLA_FP8),
    (_dsa(128), DSA_MAIN),
    *VARLEN_DIT,
)
GPU_QUICK: tuple[tuple[Shape, Runtime], ...] = (
    (_mha(32, 8, 128), QUICK_MHA),
    (_mla(128), QUICK_MLA),
    (_mla(16), QUICK_MLA_SMALL),
    (_dsa(128), QUICK_DSA),
    (_mha(24, 24, 128), Runtime((), (), varlen=((1, 4608),))),
)
# The CPU: float32, tiny heads and lengths (the interpreter-free backends only: sdpa, torch_native).
CPU_MLA = dict(rank=64, rope=16, nope=32, v=32, dtype="fp32")
CPU_DSA = dict(CPU_MLA, topk=8, index_heads=2, index_dim=16)
CPU_FULL = (
    (_mha(4, 2, 32, "fp32"), _grid((1, 4), (32, 128), [(32, 0, 1), (16, 48, 1), (16, 16, 2)])),
    (_mla(4, **CPU_MLA), _grid((2,), (64,), [(16, 48, 1)])),
    (_dsa(4, **CPU_DSA), _grid((2,), (64,), [(16, 48, 1)])),
    (_mha(4, 4, 32, "fp32"), Runtime((), (), varlen=((3, 40),))),
)
CPU_QUICK = (
    (_mha(4, 2, 32, "fp32"), _grid((2,), (64,), [(32, 0, 1), (16, 48, 1)])),
    (_mla(4, **CPU_MLA), _grid((2,), (64,), [(16, 48, 1)])),
    (_dsa(4, **CPU_DSA), _grid((2,), (64,), [(16, 48, 1)])),
)


def buckets(grid: Iterable[tuple[Shape, Runtime]]) -> list[Bucket]:
    """Every bucket of ``grid``, decode first (each page size in turn) within each static shape."""
    out = []
    for shape, rt in grid:
        out += [bucket(shape, "decode", b, 1, ctx, page) for page in rt.decode_pages for b, ctx in rt.decode]
        out += [bucket(shape, "prefill", b, new, prefix + new) for new, prefix, b in rt.prefill]
        out += [bucket(shape, "varlen", b, tokens, tokens) for b, tokens in rt.varlen]
    return out


def bucket(shape: Shape, phase: str, batch: int, new: int, context: int, page_size: int = PAGE_SIZE) -> Bucket:
    return Bucket(shape, phase, batch, new, context, page_size)


def default_grid(device: str, quick: bool) -> tuple[tuple[Shape, Runtime], ...]:
    if device == "cpu":
        return CPU_QUICK if quick else CPU_FULL
    return GPU_QUICK if quick else GPU_FULL


def model_grid(models, device: str, quick: bool, platform, request=None) -> list[tuple[Shape, Runtime]]:
    """``--models``: each model's own shape as ``plan(model, platform, request)`` runs it
    (``request``: the fields `attnkit plan` takes, handed over unchanged; its dtypes and heads a
    rank are ``plan.run``'s: one parse, the planner's defaults), with the runtime shapes of the
    default grid's first entry of the same kind, decodes also at the plan's page size. A
    request nothing can serve here raises the plan's error."""
    from attnkit.planning.solver import plan

    runtimes = {}
    for shape, rt in default_grid(device, quick):
        runtimes.setdefault((shape.kind, shape.topk is not None), rt)
    out: list[tuple[Shape, Runtime]] = []
    for model in models:
        run = plan(model, platform, request, strict=True).run
        shape = model_shape(model, {"dtype": run.dtype, "kv_cache_dtype": run.kv_cache_dtype,
                                    "tp_size": run.tp_size})
        if shape is None:
            continue
        rt = runtimes[(shape.kind, shape.topk is not None)]
        if run.page_size not in rt.decode_pages:
            rt = replace(rt, decode_pages=(*rt.decode_pages, run.page_size))
        if (shape, rt) not in out:
            out.append((shape, rt))
    return out
