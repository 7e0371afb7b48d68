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
from attnkit.registry import load_backend
from conformance_cases import (CHUNK_SIZES, DEFAULT_FP8_TOLERANCE, FP8_KV_TOLERANCE, NORM_TOLERANCE,
                               Conf, all_cases, params, torch_device)
from factories import assert_close, make_case, make_layer, torch_dtype

ACCURACY, PROBES = all_cases()
LARGE_LOGIT_TOLERANCE = 5e-2   # fp16 rounds logits near 30 to ~0.02: a precision floor, not a bug


def _mla_config(dims: tuple[int, int]) -> MLAConfig:
    rank, rope = dims
    width = 128 if rank >= 512 else 32            # DeepSeek-sized heads for the real latent
    return MLAConfig(kv_lora_rank=rank, qk_rope_head_dim=rope, qk_nope_head_dim=width, v_head_dim=width)


def _chunked_lengths(mode: str, c: int, ps: int) -> tuple[list[int], list[int]]:
    """(prefix_lens, new_lens) for chunk size c: every mode crosses a chunk boundary (new
    tokens on both sides of one, a decode on each side of one) and spans several chunks."""
    return {
        "prefill": ([0, 0], [2 * c + 3, c - 1]),
        "prefix": ([c - 2, c + ps + 1], [5, c + 2]),
        "mixed": ([0, 2 * c - 1], [c + 2, 1]),
        "decode": ([c - 1, c, 3 * c + 1 + ps], [1, 1, 1]),    # last of chunk 0, first of chunk 1
        "verify": ([c - 1, 2 * c - 2], [3, 3]),
    }[mode]


def _lengths(c: Conf) -> tuple[list[int], list[int]]:
    """(prefix_lens, new_lens) for the conf's mode and edge case, at its page size."""
    ps = c.page_size
    if c.attn_chunk is not None and (c.edge in (None, "chunk_and_window")) and c.probe is None:
        return _chunked_lengths(c.mode, c.attn_chunk, ps)
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
        sliding_window=({"window_ge_seq": 10_000}.get(c.edge, 5)
                        if f == "sliding_window" or c.edge == "chunk_and_window" else None),
        attention_chunk=c.attn_chunk if f == "chunked_local" else None,
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


@pytest.mark.parametrize("conf", params(ACCURACY))
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


@pytest.mark.parametrize("conf", params(PROBES))
def test_undeclared_input_is_refused(conf: Conf):
    """An input outside the declaration raises AttnkitError instead of computing."""
    case = build(conf)
    with pytest.raises(AttnkitError):
        run(conf, case)


def test_cases_cover_every_declared_value():
    """The covering set really covers: each declared value of each axis has a case."""
    from attnkit.registry import declarations
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


CHUNKED = [c for c in ACCURACY if c.attn_chunk is not None]


def _positions(c: Conf) -> list[list[int]]:
    """Each request's new-token positions."""
    return [list(range(p, p + n)) for p, n in zip(*_lengths(c))]


def test_chunked_cases_cross_chunk_boundaries():
    """A chunked case the chunk cannot change would pass with the mask left out: every case
    has queries past the first chunk (keys cut off), and crosses a boundary inside one
    request's new tokens, or (decode) has a query last in its chunk and one first in its."""
    assert CHUNKED
    for conf in CHUNKED:
        c, reqs = conf.attn_chunk, _positions(conf)
        assert any(p >= c for ps in reqs for p in ps), f"{conf.id}: no query past the first chunk"
        if conf.mode == "decode":
            ends = {p % c for ps in reqs for p in ps if p >= c - 1}
            assert {0, c - 1} <= ends, f"{conf.id}: no decode on both sides of a chunk boundary"
        else:
            assert any(ps[0] // c != ps[-1] // c for ps in reqs), f"{conf.id}: no boundary crossed"


def test_chunked_cases_use_pages_that_do_not_divide_the_chunk():
    from attnkit.registry import declarations

    for decl in declarations().values():
        if "chunked_local" not in decl.capabilities.features:
            continue
        mine = [c for c in CHUNKED if c.backend == decl.name]
        for mode in ("decode", "prefix", "prefill"):
            odd = [c for c in mine if c.mode == mode and c.attn_chunk % c.page_size]
            assert odd, f"{decl.name}: no {mode} case whose page size does not divide the chunk"
        assert {c.attn_chunk for c in mine} >= set(CHUNK_SIZES)


# Plausible ways to get the chunk mask wrong: (p, k, c) -> bool, for keys k <= p.
WRONG_CHUNK_RULES = {
    "boundary_one_late": lambda p, k, c: (k + 1) // c == (p + 1) // c,
    "boundary_one_early": lambda p, k, c: (k - 1) // c == (p - 1) // c,
    "chunk_one_longer": lambda p, k, c: k // (c + 1) == p // (c + 1),
    "chunk_one_shorter": lambda p, k, c: k // (c - 1) == p // (c - 1),
    "one_key_before_the_chunk": lambda p, k, c: k >= (p // c) * c - 1,
    "previous_chunk_too": lambda p, k, c: k // c >= p // c - 1,
    "no_chunk_mask": lambda p, k, c: k >= 0,
}


def test_a_wrong_chunk_mask_fails_every_chunked_case(monkeypatch):
    """The suite would catch a backend whose chunk mask is off: for every chunked MHA case of
    one backend on CPU (the others' cases have the same shapes), the reference with a wrong
    mask (from WRONG_CHUNK_RULES) misses the right one by more than the case's tolerance."""
    def masked_by(rule):
        def mask(prefix, n_q, n_keys, spec, device):
            p = torch.arange(prefix, prefix + n_q, device=device)[:, None]
            k = torch.arange(n_keys, device=device)[None, :]
            ok = (k <= p) & rule(p, k, spec.attention_chunk)
            if spec.sliding_window is not None:
                ok &= p - k < spec.sliding_window
            return ok
        return mask

    confs = [c for c in CHUNKED if (c.backend, c.device, c.kind) == ("torch_native", "cpu", "mha")]
    assert confs
    for conf in confs:
        case = build(conf)
        right = case.reference()
        for name, rule in WRONG_CHUNK_RULES.items():
            with monkeypatch.context() as patch:
                patch.setattr(reference, "_self_mask", masked_by(rule))
                wrong = reference.attention(case.q, case.k, case.v, case.layer, case.cache, case.meta)
            with pytest.raises(AssertionError):
                assert_close(wrong, right, dtype=conf.dtype, kv_dtype=conf.kv_dtype,
                             fp8=FP8_KV_TOLERANCE.get(conf.backend, DEFAULT_FP8_TOLERANCE),
                             what=f"{conf.id} with {name}")
