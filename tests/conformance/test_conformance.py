"""Every registered backend against the float64 reference over its declared envelope.

Cases come from the declarations (conformance_cases.py); a backend added later is picked up
automatically. CUDA cases are marked ``gpu`` (``pytest -m gpu`` on a GPU machine runs the
GPU conformance of every backend, CPU-capable ones included).
"""
from __future__ import annotations

import pytest
import torch

from attnkit import reference
from attnkit.errors import AttnkitError
from attnkit.kvcache.paged import FP8_DTYPES
from attnkit.model.spec import MLAConfig
from attnkit.planning.registry import load_backend
from conformance_cases import (DEFAULT_FP8_TOLERANCE, FP8_KV_TOLERANCE, NORM_TOLERANCE, Conf,
                               all_cases, torch_device)
from factories import assert_close, make_case, make_layer, torch_dtype

ACCURACY, PROBES = all_cases()
LARGE_LOGIT_TOLERANCE = 5e-2   # fp16 rounds logits near 30 to ~0.02: a precision floor, not a bug


def _params(confs: list[Conf]):
    out = []
    for c in confs:
        marks = [pytest.mark.gpu] if c.device == "cuda" else []
        if c.skip:
            marks.append(pytest.mark.skip(reason=c.skip))
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


def _mla_config(dims: tuple[int, int]) -> MLAConfig:
    rank, rope = dims
    width = 128 if rank >= 512 else 32            # DeepSeek-sized heads for the real latent
    return MLAConfig(kv_lora_rank=rank, qk_rope_head_dim=rope, qk_nope_head_dim=width, v_head_dim=width)


def _lengths(c: Conf) -> tuple[list[int], list[int]]:
    """(prefix_lens, new_lens) for the conf's mode and edge case, at its page size."""
    ps = c.page_size
    by_edge = {
        "idle": ([], []),
        "one_token_prompts": ([0, 0, 0], [1, 1, 1]),
        "large_logits": ([300, 157], [1, 1]),
    }
    if c.edge == "garbage":                        # ragged: padded rows and partial pages
        return {"mixed": ([0, 2 * ps + 3, 5], [40, 1, 3]), "decode": ([2 * ps + 5, 3, ps], [1, 1, 1]),
                "prefill": ([0, 0, 0], [5, 9, 2])}[c.mode]
    if c.edge == "page_boundary":                  # every KV length ends exactly on a page
        return ([ps - 1, 2 * ps - 1], [1, 1]) if c.mode == "decode" else ([ps, 2 * ps - 3], [ps, 3])
    if c.edge in by_edge:
        return by_edge[c.edge]
    return {
        "prefill": ([0, 0], [5, 9]),
        "prefix": ([ps + 3, 7], [6, 4]),
        "mixed": ([0, 9], [7, 1]),
        "decode": ([4, 2 * ps - 1, 13], [1, 1, 1]),
        "verify": ([6, ps], [3, 3]),
    }[c.mode]


def build(c: Conf):
    """The layer and the case (inputs, cache, metadata, reference) for one conf."""
    f = c.feature
    layer = make_layer(
        kind=c.kind, num_heads=c.heads[0], num_kv_heads=c.heads[1], head_dim=c.head_dim or 64,
        role={"cross_attention": "cross", "non_causal": "encoder"}.get(f, "decoder"),
        sliding_window=(10_000 if c.edge == "window_ge_seq" else 5) if f == "sliding_window" else None,
        logit_softcap=5.0 if f == "logit_softcap" else None, sinks=f == "sinks",
        mla=_mla_config(c.mla_dims) if c.kind == "mla" else None,
        dtype=c.dtype, device=torch_device(c.device), seed=c.seed)
    prefix, new = _lengths(c)
    cross = f == "cross_attention"
    return make_case(
        layer, prefix_lens=prefix, new_lens=new, page_size=c.page_size, dtype=c.dtype,
        kv_dtype=c.kv_dtype, device=torch_device(c.device), mode="verify" if c.mode == "verify" else None,
        encoder_lens=[6, 11, 3][:len(new)] if cross else None,
        encoder="write" if c.mode == "prefill" else "cached", seed=c.seed,
        q_scale={"large_logits": 8.0, "logit_softcap": 3.0}.get(c.edge or f, 1.0),
        garbage=c.edge == "garbage")


def run(c: Conf, case):
    backend = load_backend(c.backend)
    step = backend.prepare(case.meta, case.cache)
    return backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)


@pytest.mark.parametrize("conf", _params(ACCURACY))
def test_matches_reference(conf: Conf):
    case = build(conf)
    expected_cache = reference.stored_kv(case.k, case.v, case.layer, case.cache, case.meta)
    check(conf, case, run(conf, case))
    _check_cache_written(case, expected_cache)


def check(conf: Conf, case, out) -> None:
    """``out`` is the backend's output for ``case``: shape, dtype, device, finite, and close to
    the reference by the conf's tolerances (factories.assert_close)."""
    spec = case.layer.spec
    dv = spec.mla.v_head_dim if spec.kind == "mla" else spec.value_dim
    assert tuple(out.shape) == (case.meta.num_tokens, spec.num_heads * dv)
    assert out.dtype == torch_dtype(conf.dtype) and out.device.type == torch_device(conf.device)
    assert torch.isfinite(out).all(), "non-finite output"
    if conf.edge == "large_logits" and conf.dtype != "fp32":
        fp8 = LARGE_LOGIT_TOLERANCE
        tol_dtype, tol_kv = conf.dtype, "fp8_e4m3"     # route through the explicit bound
    else:
        fp8 = FP8_KV_TOLERANCE.get(conf.backend, DEFAULT_FP8_TOLERANCE)
        tol_dtype, tol_kv = conf.dtype, conf.kv_dtype
    assert_close(out, case.reference(), dtype=tol_dtype, kv_dtype=tol_kv, fp8=fp8,
                 norm=NORM_TOLERANCE.get((conf.backend, conf.dtype)), what=conf.id)


def _check_cache_written(case, expected) -> None:
    """The backend stored the step's K/V where the slot mapping says, as the reference's own
    rounding says the cache must hold them (reference.stored_kv: not cache.write)."""
    got = reference.stored_kv(None, None, case.layer, case.cache, case.meta)
    lid = case.layer.layer_id
    for name, g, want in zip(("latent",) if case.layer.spec.kind == "mla" else ("k", "v"), got, expected):
        if case.cache.dtype in FP8_DTYPES:          # a kernel may round to fp8 its own way: 1 ulp
            scale = case.cache.k_scales[lid] if name != "v" else case.cache.v_scales[lid]
            torch.testing.assert_close(g, want, rtol=0.13, atol=1e-2 * scale, equal_nan=True,
                                       msg=lambda m: f"cache {name} after forward: {m}")
        else:                                       # exact (garbage cases hold NaN / inf)
            torch.testing.assert_close(g, want, rtol=0, atol=0, equal_nan=True,
                                       msg=lambda m: f"cache {name} after forward: {m}")


@pytest.mark.parametrize("conf", _params(PROBES))
def test_undeclared_input_is_refused(conf: Conf):
    """An input outside the declaration raises AttnkitError instead of computing."""
    case = build(conf)
    with pytest.raises(AttnkitError):
        run(conf, case)


def test_cases_cover_every_declared_value():
    """The covering set really covers: each declared value of each axis has a case."""
    from attnkit.planning.registry import declarations
    from conformance_cases import DUAL_CHUNK_SKIP, _axes, _devices

    for decl in declarations().values():
        if "dual_chunk" in decl.capabilities.features:
            continue      # its inputs differ (three query rotations): tests/dual_chunk covers it
        for device in _devices(decl):
            for kind in decl.capabilities.kinds:
                mine = [c for c in ACCURACY if (c.backend, c.device, c.kind) == (decl.name, device, kind)
                        and c.skip != DUAL_CHUNK_SKIP]
                assert mine, f"{decl.name}/{device}/{kind}: no accuracy case at all"
                for axis, values in _axes(decl, kind, device).items():
                    missing = [v for v in values if all(getattr(c, axis) != v for c in mine)]
                    assert not missing, f"{decl.name}/{device}/{kind}: {axis} values {missing} untested"
