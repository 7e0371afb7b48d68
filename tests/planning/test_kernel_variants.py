"""Kernel variants in planning: a backend ranks as its best variant that can run here; each role
gets a kernel table from the profile; variants that cannot run here (Triton version, compute
capability, dtype, heads, pages) are left out and said so; tune times each that can."""
import dataclasses

from attnkit import plan
from attnkit.hardware import get_preset
from attnkit.planning.profile import Bucket, Shape
from attnkit.registry import declarations
from attnkit.tune.run import variants_to_time

from profile_fakes import entry, only_given_profiles, profile, write  # noqa: F401


def _v(e: dict, variant: str) -> dict:
    return {**e, "variant": variant}


ROWS = [
    _v(entry("triton", "decode", 300, batch=1), "split_write"), _v(entry("triton", "decode", 250, batch=1), "split"),
    _v(entry("triton", "decode", 3000, batch=64), "split_write"), _v(entry("triton", "decode", 4000, batch=64), "split"),
    entry("sdpa", "decode", 200, batch=1), entry("sdpa", "decode", 3900, batch=64),
    _v(entry("triton", "prefill", 600, new=16384, context=16384), "gluon"),
    _v(entry("triton", "prefill", 480, new=16384, context=16384), "tma"),
    _v(entry("triton", "prefill", 450, new=16384, context=16384), "paged"),
    entry("sdpa", "prefill", 550, new=16384, context=16384),
]


def test_backend_ranks_as_its_best_variant_and_the_table_names_it(tmp_path, only_given_profiles):
    p = plan("llama-3.1-8b", "h200", profile=write(tmp_path / "p.json", profile(ROWS)))
    assert p.ok and p.prefill_backend == "triton" and p.decode_backend == "triton"
    assert "600 vs 550" in p.why["prefill"]                      # gluon's rate, not the mean of variants
    decode = p.run.role("decode").kernels
    assert [r.order[0].variant for r in decode.rows] == ["split_write", "split"]
    assert decode.candidates(1, 1, 4096)[0] == "split_write" and decode.candidates(100, 1, 4096)[0] == "split"
    assert "split_write [BLOCK_N=64 num_warps=4 num_stages=4] in 1 of 2 buckets" in p.kernel_why["decode"]
    assert decode.configs["split"] == {"BLOCK_N": 64, "num_warps": 4, "num_stages": 4}  # configs.py's
    assert p.run.role("prefill").kernels.rows[0].order[0].variant == "gluon"
    assert p.run.backend_options("triton")["kernels"]["decode"] is decode
    assert p.to_dict()["run"]["roles"]["decode"]["kernels"]["rows"][0]["order"][0]["variant"] == "split_write"


def test_a_variant_the_installed_triton_cannot_build_is_left_out_and_named(tmp_path, only_given_profiles):
    h200 = get_preset("h200")
    other = dataclasses.replace(h200, packages={**h200.packages, "triton": "3.9.0"})
    p = plan("llama-3.1-8b", other, profile=write(tmp_path / "p.json", profile(ROWS)))
    assert p.ok and p.prefill_backend == "sdpa" and "550 vs 480" in p.why["prefill"]  # tma stands for triton
    slower_sdpa = [e for e in ROWS if not (e["backend"] == "sdpa" and e["phase"] == "prefill")] + [
        entry("sdpa", "prefill", 400, new=16384, context=16384)]
    p = plan("llama-3.1-8b", other, profile=write(tmp_path / "q.json", profile(slower_sdpa)))
    assert p.prefill_backend == "triton" and "gluon" not in p.run.role("prefill").kernels.variants()
    assert "gluon (builds with Triton >= 3.6, < 3.7; Triton 3.9.0 here)" in p.kernel_why["prefill"]
    assert "tma [" in p.kernel_why["prefill"] and "] in 1 of 1 buckets" in p.kernel_why["prefill"]


def test_tune_times_each_variant_that_can_run_the_bucket():
    triton, mla = declarations()["triton"], declarations()["triton_mla"]
    h200 = get_preset("h200")
    shape = Shape("mha", 32, 8, 128, 128, "bf16", "bf16")
    assert variants_to_time(Bucket(shape, "decode", 1, 1, 4096, 16), triton, h200) == \
        ["split", "split_write", "split_merge", "split_fixed", "split_heads", "stream"]
    d256 = dataclasses.replace(shape, heads=16, head_dim=256, v_head_dim=256)   # split_heads, stream: d <= 128
    assert not {"split_heads", "stream"} & set(variants_to_time(Bucket(d256, "decode", 1, 1, 4096, 16), triton, h200))
    # stream: TMA copies of whole pages of 16 / 32 / 64 rows
    assert "stream" not in variants_to_time(Bucket(shape, "decode", 1, 1, 4096, 8), triton, h200)
    rows = ["gluon_rows", "gluon_rows_persistent", "gluon_rows_chain"]   # any step: batched, over a prefix
    assert variants_to_time(Bucket(shape, "prefill", 1, 2048, 2048, 16), triton, h200) == \
        ["paged", "paged_new_kv", "tma", "gluon", "paged_fixed", *rows]
    assert variants_to_time(Bucket(shape, "prefill", 8, 2048, 2048, 16), triton, h200) == \
        ["paged", "paged_new_kv", "tma", "paged_fixed", *rows]
    assert variants_to_time(Bucket(shape, "prefill", 1, 2048, 34816, 16), triton, h200) == \
        ["paged", "paged_new_kv", "tma", "paged_fixed", *rows]
    d256 = dataclasses.replace(shape, head_dim=256, v_head_dim=256)     # chain: d <= 128 (its smem)
    assert variants_to_time(Bucket(d256, "prefill", 8, 2048, 2048, 16), triton, h200)[-2:] == rows[:2]
    mla16 = Shape("mla", 16, 1, 192, 128, "bf16", "bf16", 512, 64)
    mla128 = dataclasses.replace(mla16, heads=128)
    assert variants_to_time(Bucket(mla16, "decode", 1, 1, 4096, 64), mla, h200) == \
        ["column_split", "whole_rows"]
    assert variants_to_time(Bucket(mla128, "decode", 1, 1, 4096, 16), mla, h200) == \
        ["column_split", "whole_rows", "column_split_tma"]
    assert variants_to_time(Bucket(mla128, "decode", 1, 1, 4096, 64), mla, h200)[-1] == "ws"
    assert variants_to_time(Bucket(shape, "decode", 1, 1, 4096, 16), declarations()["sdpa"], h200) == [None]


def test_resuming_the_shipped_profile_measures_only_the_variants_it_lacks():
    """`attnkit tune --backends triton --out <the shipped H200 profile less the split_fixed /
    paged_fixed entries and the varlen buckets>` times just those and nothing it holds."""
    from importlib import resources

    from attnkit.planning.profile import load_profile
    from attnkit.tune.grid import default_grid
    from attnkit.tune.run import pending

    shipped = load_profile(resources.files("attnkit.planning") / "profiles" / "nvidia-h200.json")
    fixed = {"split_fixed", "paged_fixed"}
    shipped = dataclasses.replace(shipped, entries=[e for e in shipped.entries if e.variant not in fixed
                                                    and e.bucket.phase != "varlen"])
    done = {e.key() for e in shipped.entries}
    grid, h200 = default_grid("cuda", False), get_preset("h200")
    # the varlen call's buckets (issue 29), dropped above: all of their variants
    varlen = pending(grid, declarations(), h200, ["triton"], done, phases=("varlen",))
    assert {k for _, _, k in varlen} == {"varlen_tile", "varlen_gluon", "varlen_gluon_persistent", "varlen_gluon_split"}
    jobs = pending(grid, declarations(), h200, ["triton"], done, phases=("decode", "prefill"))
    held = {e.variant for e in shipped.entries if e.backend == "triton"}
    assert jobs and {n for _, n, _ in jobs} == {"triton"}
    assert {k for _, _, k in jobs} >= {"split_fixed", "paged_fixed"} and not held & {"split_fixed", "paged_fixed"}
    # a bucket lacking a variant is timed again whole (one run per bucket): every variant that
    # can run it, not only the missing one, and no bucket that lacks none
    lacking = {(b, n) for b, n, k in jobs if (n, b, k) not in done}
    assert {(b, n) for b, n, _ in jobs} == lacking
    for b, n in lacking:
        assert [k for bb, nn, k in jobs if (bb, nn) == (b, n)] == variants_to_time(b, declarations()[n], h200)
    decode = {b for b, _, k in jobs if k == "split_fixed"}
    assert decode == {e.bucket for e in shipped.entries if e.variant == "split"}   # every bucket split was timed at


def test_mla_roles_name_variant_tiles_and_rate_with_the_shipped_profile():
    """deepseek-v3 on the H200: each triton_mla role names its leading variant with its launch
    configuration (triton_mla/configs.py at 128 heads, latent 512, 227 KB blocks) and rate; the
    split count is left to run time and the plan says so."""
    p = plan("deepseek-v3", "h200")
    assert p.ok and p.run.role("decode").backend == "triton_mla"
    decode = p.run.role("decode").kernels
    assert decode.configs["column_split"] == {"BLOCK_H": 128, "BLOCK_T": 1, "BLOCK_N": 32, "num_warps": 8,
                                              "num_stages": 3, "V_SPLIT": 2, "MERGE_SPLITS": 0,
                                              "num_splits": "from-SM-count"}
    assert decode.configs["column_split_tma"]["num_stages"] == 2
    lead = decode.rows[0].order[0].variant
    assert f"{lead} [" in p.kernel_why["decode"] and "GB/s" in p.kernel_why["decode"]
    extend = p.to_dict()["run"]["roles"]["extend"]["kernels"]
    assert extend["configs"]["mha_form"] == {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    assert extend["configs"]["whole_rows"]["BLOCK_H"] == 64
    assert "mha_form [BLOCK_M=64" in p.kernel_why["extend"] and "TFLOP/s" in p.kernel_why["extend"]


def test_mla_tiles_follow_the_device_geometry_and_none_is_guessed():
    """The tiles are functions of the platform's shared memory: ~99 KB blocks get the small ones;
    a platform that does not state its shared memory gets no configuration named."""
    l4 = dataclasses.replace(get_preset("h200"), shared_memory_kb=99)
    p = plan("deepseek-v3", l4)
    assert p.run.role("decode").kernels.configs["whole_rows"]["BLOCK_N"] == 16
    assert p.run.role("extend").kernels.configs["mha_form"]["BLOCK_N"] == 32
    unknown = dataclasses.replace(get_preset("h200"), shared_memory_kb=None)
    assert plan("deepseek-v3", unknown).run.role("decode").kernels.configs == {}


def test_an_unmeasured_role_names_its_variants_launch_configurations():
    """No profile row for the device (an A100): the reason still names each variant with the
    configuration it would launch with, in the order the backend tries them."""
    p = plan("llama-3.1-8b", "a100", profile=False)
    why = p.kernel_why["decode"]
    assert "split [BLOCK_N=64 num_warps=4 num_stages=4]" in why and "no bucket measured" in why
    p = plan("deepseek-v3", "a100", profile=False)
    assert "whole_rows [BLOCK_H=64 BLOCK_T=1 BLOCK_N=32 num_warps=8 num_stages=3" in p.kernel_why["decode"]
