"""The conformance cases, generated from the backend declarations (never a hand list).

For every registered backend, every platform it declares that tests can reach (cpu; cuda
marked ``gpu``) and every kind it declares, the axes

    dtype x kv_cache_dtype x page size x (H_q, H_kv) x head dim (MLA: latent dims)
    x feature x mode

are taken from its declaration and *covered*, not multiplied: case i takes value
``(i + offset) % len`` of each axis, and a value that still went unused gets a case of its
own. A backend declaring chunked_local also gets every mode at every chunk size of
CHUNK_SIZES (an axis of the case, small next to the sequences so boundaries are crossed),
mostly on page sizes that do not divide the chunk. Then named edge cases (IDLE, one-token
prompts, KV ending on a page boundary, a window at least the sequence, a window inside a
chunk, long fp16 decode with large logits), and probes: one input outside the declaration
per undeclared feature / kind / dtype / phase / page size / head dim, each of which must
raise AttnkitError.
"""
from __future__ import annotations

import importlib.util
import os
import zlib
from dataclasses import dataclass, replace

from attnkit.registry.capabilities import DTYPES, FEATURES, KINDS, KV_CACHE_DTYPES, MultipleOf
from attnkit.registry import declarations

# Features a layer carries (modes and engine features are separate axes or out of scope).
LAYER_FEATURES = ("sliding_window", "logit_softcap", "sinks", "cross_attention", "non_causal",
                  "chunked_local")
CHUNK_SIZES = (3, 8, 16)                     # attention_chunk of chunked_local cases
PROBE_CHUNK = 4
HEADS = ((4, 4), (8, 2), (4, 1))             # MHA, GQA 4, MQA
ANY_HEAD_DIMS = (64, 128, 96, 256)
ANY_MLA_DIMS = ((64, 16),)
DUAL_CHUNK_SKIP = "dual chunk layers take three query rotations; covered by tests/dual_chunk"
SPARSE_ONLY_SKIP = "serves only DeepSeek sparse attention layers; covered by tests/conformance/test_dsa.py"
# Bound (atol = rtol) per backend with an fp8 KV cache. The reference rounds the new K/V to
# fp8 by the documented convention itself (reference.stored_kv) and reads the cached ones
# back by it, so only the compute side differs. Every
# backend registered on 2026-11-29 passed at the default, on CPU and on an H200; a backend
# that needs more gets an entry here with the reason.
FP8_KV_TOLERANCE: dict[str, float] = {}
DEFAULT_FP8_TOLERANCE = 2e-2
# Norm-relative bound (||out - ref|| / ||ref||) per (backend, compute dtype) where it differs
# from factories.NORM_BOUND, with the measured error and the reason. None so far.
NORM_TOLERANCE: dict[tuple[str, str], float] = {}


@dataclass(frozen=True)
class Conf:
    backend: str
    device: str
    kind: str
    dtype: str
    kv_dtype: str
    page_size: int
    heads: tuple[int, int]
    head_dim: int
    mla_dims: tuple[int, int] | None
    feature: str | None
    mode: str                       # prefill | prefix | mixed | decode | verify | idle
    attn_chunk: int | None = None   # chunked_local: the layer's attention_chunk
    edge: str | None = None         # named edge case
    probe: str | None = None        # what lies outside the declaration (must raise)
    skip: str | None = None

    @property
    def id(self) -> str:
        parts = [self.backend, self.device, self.kind, self.edge or self.probe or self.mode,
                 self.dtype, f"kv-{self.kv_dtype}", f"p{self.page_size}"]
        if self.kind == "mha":
            parts += [f"h{self.heads[0]}-{self.heads[1]}", f"d{self.head_dim}"]
        else:
            parts += [f"mla{self.mla_dims[0]}-{self.mla_dims[1]}"]
        if self.feature:
            parts.append(self.feature)
        if self.attn_chunk is not None:
            parts.append(f"c{self.attn_chunk}")
        if self.mode != (self.edge or self.probe or self.mode):
            parts.append(self.mode)
        return "-".join(parts)

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())


def page_sizes(caps) -> tuple[int, ...]:
    if caps.page_sizes == "any":
        return (1, 16, 64, 7)
    if isinstance(caps.page_sizes, MultipleOf):
        return (caps.page_sizes.n, 2 * caps.page_sizes.n)
    return tuple(caps.page_sizes)


def modes(caps) -> tuple[str, ...]:
    out = ("prefill", "prefix", "mixed") if "prefill" in caps.phases else ()
    out += ("decode",) if "decode" in caps.phases else ()
    return out + (("verify",) if "verify" in caps.features and "prefill" in caps.phases else ())


INTERPRETER = "interp"      # Triton kernels on the CPU through the interpreter (tests/conftest.py)


def torch_device(device: str) -> str:
    """The torch device a conformance device runs on."""
    return "cpu" if device == INTERPRETER else device


def params(confs) -> list:
    """pytest params of cases with ``id``, ``device`` and ``skip``: CUDA ones marked gpu."""
    import pytest

    out = []
    for c in confs:
        marks = [pytest.mark.gpu] if c.device == "cuda" else []
        if c.skip:
            marks.append(pytest.mark.skip(reason=c.skip))
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


def _devices(decl) -> list[str]:
    """Declared platforms tests can reach (cpu; cuda, marked gpu), plus the interpreter for a
    CUDA-only Triton backend, so that every CI run proves its declaration on the CPU too."""
    caps = decl.capabilities
    out = [d for d in ("cpu", "cuda") if d in caps.platforms]
    if "triton" in caps.requires and "cuda" in caps.platforms and "cpu" not in caps.platforms:
        out.append(INTERPRETER)
    return out


def sparse_only(decl) -> bool:
    """Whether the backend refuses every layer without sparse_topk (its runtime_check says
    AK440 to a plain MLA layer): its dense cases would only be refusals."""
    if "sparse_topk" not in decl.capabilities.features or decl.runtime_check is None:
        return False
    from attnkit.errors import AttnkitError
    from attnkit.model.spec import LayerAttention, MLAConfig
    module, name = decl.runtime_check.split(":")
    check = getattr(importlib.import_module(module), name)
    plain = LayerAttention(layer_id=0, num_heads=4, num_kv_heads=1, head_dim=48, v_head_dim=32,
                           kind="mla", mla=MLAConfig(64, 16, 32, 32))
    try:
        check(plain, page_size=16)
    except AttnkitError as exc:
        return exc.code == "AK440"
    return False


def _interpreter_skip(device: str) -> str | None:
    if device == INTERPRETER and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return "the Triton interpreter runs where there is no CUDA (tests/conftest.py)"
    return None


def _missing_requirement(decl) -> str | None:
    for pkg in decl.capabilities.requires:
        if importlib.util.find_spec(pkg) is None:
            return f"{decl.name} needs {pkg}, not installed"
    return None


def _axes(decl, kind: str, device: str | None = None) -> dict[str, tuple]:
    """The declared values of every axis. The interpreter leaves bf16 to the GPU: its tl.dot
    on bf16 operands is wrong (DESIGN.md), and it casts fp32 to bf16 by truncation where a
    GPU rounds to nearest (Triton 3.x: the K/V store kernel's bf16 pages differ by an ulp)."""
    caps = decl.capabilities
    mla = None if caps.mla_dims is None else (ANY_MLA_DIMS if caps.mla_dims == "any" else tuple(caps.mla_dims))
    gpu_only = ("bf16",) if device == INTERPRETER else ()
    return {
        "dtype": tuple(d for d in caps.dtypes if d not in gpu_only),
        "kv_dtype": tuple(d for d in caps.kv_cache_dtypes if d not in gpu_only),
        "page_size": page_sizes(caps),
        "heads": HEADS if kind == "mha" else ((4, 1),),
        "head_dim": (ANY_HEAD_DIMS if caps.head_dims == "any" else caps.head_dims) if kind == "mha" else (0,),
        "mla_dims": (None,) if kind == "mha" else mla,
        "feature": (None,) + tuple(f for f in LAYER_FEATURES if f in caps.features),
        "mode": modes(caps),
    }


def _fit(conf: Conf, i: int = 0) -> Conf:
    """Make a combination meaningful: encoder self-attention is a prompt-only, no-prefix step;
    a chunked_local layer gets a chunk size."""
    if conf.feature == "non_causal":
        return replace(conf, mode="prefill")
    if conf.feature == "chunked_local" and conf.attn_chunk is None:
        return replace(conf, attn_chunk=CHUNK_SIZES[i % len(CHUNK_SIZES)])
    return conf


def covering(decl, device: str, kind: str) -> list[Conf]:
    axes = _axes(decl, kind, device)
    n = max(len(v) for v in axes.values())
    offsets = {name: zlib.crc32(name.encode()) % 7 for name in axes}
    base = dict(backend=decl.name, device=device, kind=kind)
    confs = [_fit(Conf(**base, **{a: vals[(i + offsets[a]) % len(vals)] for a, vals in axes.items()}), i)
             for i in range(n)]
    first = {a: vals[0] for a, vals in axes.items()}
    for axis, vals in axes.items():
        for value in vals:
            if not any(getattr(c, axis) == value for c in confs):
                confs.append(_fit(Conf(**base, **(first | {axis: value}))))
    return confs


def chunked(decl, device: str, kind: str) -> list[Conf]:
    """chunked_local at every mode x chunk size, the other axes rotating; the page size is
    one that does not divide the chunk wherever the declaration has one (so chunk starts
    fall inside pages), else the next declared size."""
    if "chunked_local" not in decl.capabilities.features:
        return []
    axes = _axes(decl, kind, device)
    base = dict(backend=decl.name, device=device, kind=kind, feature="chunked_local")
    out = []
    for i, (mode, chunk) in enumerate((m, c) for m in axes["mode"] for c in CHUNK_SIZES):
        pages = [p for p in axes["page_size"] if chunk % p] or list(axes["page_size"])
        pick = {a: vals[i % len(vals)] for a, vals in axes.items() if a not in ("feature", "mode")}
        out.append(Conf(**base, **(pick | dict(page_size=pages[i % len(pages)])), mode=mode,
                        attn_chunk=chunk))
    return out


def edges(decl, device: str, kind: str) -> list[Conf]:
    caps = decl.capabilities
    axes = _axes(decl, kind, device)
    dtype = "fp32" if "fp32" in axes["dtype"] else axes["dtype"][0]
    pages = axes["page_size"]
    base = Conf(decl.name, device, kind, dtype, dtype if dtype in caps.kv_cache_dtypes else caps.kv_cache_dtypes[0],
                16 if 16 in pages else pages[0], axes["heads"][-1], axes["head_dim"][0],
                axes["mla_dims"][0], None, "prefill")
    has = modes(caps)
    out = [replace(base, mode="idle", edge="idle")]
    if "prefill" in has:
        out += [replace(base, edge="one_token_prompts"), replace(base, mode="prefix", edge="page_boundary")]
    if "decode" in has:
        out.append(replace(base, mode="decode", edge="page_boundary"))
        low = next((d for d in ("fp16", "bf16") if d in axes["dtype"]), dtype)
        out.append(replace(base, mode="decode", dtype=low, edge="large_logits",
                           kv_dtype=low if low in caps.kv_cache_dtypes else base.kv_dtype))
    if "sliding_window" in caps.features:
        out.append(replace(base, mode="prefix" if "prefill" in has else "decode",
                           feature="sliding_window", edge="window_ge_seq"))
    if {"sliding_window", "chunked_local"} <= caps.features:     # both limits on one layer
        out += [replace(base, mode=m, feature="chunked_local", attn_chunk=8, page_size=pages[-1],
                        edge="chunk_and_window") for m in ("prefix", "decode") if m in has]
    return out + garbage_edges(caps, base)


def garbage_edges(caps, base: Conf) -> list[Conf]:
    """Ragged batches over a cache whose every slot but the cached K/V holds NaN / +-inf
    (pages the batch does not own, page 0 among them, and slots past each request's
    length): the output must still be the reference's. Once per phase, again with an fp8
    cache (NaN has its own encoding there), and for cross-attention over encoder pages."""
    has = modes(caps)
    fp8 = next((d for d in caps.kv_cache_dtypes if d.startswith("fp8")), None)
    out = []
    for mode in [m for m in ("mixed", "decode") if m in has]:
        out.append(replace(base, mode=mode, edge="garbage"))
        if fp8 is not None:
            out.append(replace(base, mode=mode, kv_dtype=fp8, edge="garbage"))
    if "cross_attention" in caps.features:
        out += [replace(base, mode=m, feature="cross_attention", edge="garbage")
                for m in ("prefill", "decode") if m in has]
    return out


def probes(decl, device: str) -> list[Conf]:
    """Inputs outside the declaration, one per undeclared value, on a declared base."""
    caps = decl.capabilities
    kind = caps.kinds[0]
    base = edges(decl, device, kind)[0]
    base = replace(base, mode=modes(caps)[0], edge=None)
    out = [replace(base, feature=f, mode="prefill", probe=f"no_{f}",
                   attn_chunk=PROBE_CHUNK if f == "chunked_local" else None)
           for f in LAYER_FEATURES if f not in caps.features]
    out += [replace(base, kind=k, mla_dims=ANY_MLA_DIMS[0] if k == "mla" else None, heads=(4, 1) if k == "mla" else HEADS[0],
                    head_dim=64, probe=f"no_{k}") for k in KINDS if k not in caps.kinds]
    if "verify" not in caps.features and "prefill" in caps.phases:
        out.append(replace(base, mode="verify", probe="no_verify"))
    for phase, mode in (("prefill", "prefill"), ("decode", "decode")):
        if phase not in caps.phases:
            out.append(replace(base, mode=mode, probe=f"no_{phase}"))
    out += [replace(base, dtype=d, kv_dtype=d, probe=f"no_dtype_{d}") for d in DTYPES if d not in caps.dtypes]
    out += [replace(base, kv_dtype=d, probe=f"no_kv_{d}") for d in KV_CACHE_DTYPES if d not in caps.kv_cache_dtypes]
    bad_page = next((s for s in (3, 5, 7, 12, 24) if not caps.accepts_page_size(s)), None)
    if bad_page is not None:
        out.append(replace(base, page_size=bad_page, probe="no_page_size"))
    if kind == "mha" and caps.head_dims != "any":
        out.append(replace(base, head_dim=next(d for d in (48, 80, 40) if d not in caps.head_dims), probe="no_head_dim"))
    if kind == "mla" and caps.mla_dims not in (None, "any"):
        out.append(replace(base, mla_dims=next(d for d in ((32, 16), (128, 32)) if d not in caps.mla_dims),
                           probe="no_mla_dims"))
    return out


def all_cases() -> tuple[list[Conf], list[Conf]]:
    """(accuracy cases, probes) over every registered backend."""
    accuracy, refusals = [], []
    for decl in declarations().values():
        skip = _missing_requirement(decl)
        if "dual_chunk" in decl.capabilities.features:
            skip = DUAL_CHUNK_SKIP
        if sparse_only(decl):
            skip = SPARSE_ONLY_SKIP
        for device in _devices(decl):
            why = skip or _interpreter_skip(device)
            for kind in decl.capabilities.kinds:
                confs = covering(decl, device, kind) + chunked(decl, device, kind) + edges(decl, device, kind)
                accuracy += [replace(c, skip=why) for c in dict.fromkeys(confs)]   # no repeats
            refusals += [replace(c, skip=why) for c in probes(decl, device)]
    return accuracy, refusals
