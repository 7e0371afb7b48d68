"""The page size by measurement: a profile that measured the MLA decode backend at 16- and
64-key pages. The plan fills 64 only when the decode backend was measured more than 10 % faster
there over the same buckets and every chosen backend accepts it; backend ranking compares one
page size only (the page-64 entries never enter the page-16 geometric means)."""
import dataclasses

import pytest
from profile_fakes import entry, only_given_profiles, profile, write  # noqa: F401 (a fixture)

from attnkit.planning.measured import rank
from attnkit.planning.profile import Shape, parse_profile
from attnkit.planning.solver import plan
from attnkit.registry import declarations

pytestmark = pytest.mark.usefixtures("only_given_profiles")
MLA = dict(kind="mla", heads=128, kv_heads=1, head_dim=192, mla=(512, 64))
DSV3 = Shape("mla", 128, 1, 192, 128, "bf16", "bf16", 512, 64)
BUCKETS = ((32, 4096), (128, 4096))


def decode(backend, rates, page, **kw):
    return [entry(backend, "decode", r, batch=b, context=c, page_size=page, **MLA, **kw)
            for r, (b, c) in zip(rates, BUCKETS)]


PREFILL = [entry(n, "prefill", r, new=4096, context=4096, **MLA)
           for n, r in (("sdpa", 375), ("triton_mla", 250), ("torch_native", 12))]
# page 16: triton_mla sqrt(400 * 500) = 447, torch_native sqrt(30 * 32) = 31 GB/s
AT_16 = decode("triton_mla", (400, 500), 16) + decode("torch_native", (30, 32), 16)


def with_64(scale=None, rates=(900, 1000), torch_rates=(31, 33)):
    """The page-16 rows plus page 64: triton_mla at ``rates`` (or page 16's times ``scale``)."""
    fast = tuple(r * scale for r in (400, 500)) if scale else rates
    return PREFILL + AT_16 + decode("triton_mla", fast, 64) + decode("torch_native", torch_rates, 64)


@pytest.fixture
def faster_64(tmp_path):
    return write(tmp_path / "h200.json", profile(with_64()))


def page_fill(p):
    return next(a for a in p.adjustments if a["field"] == "page_size")


SOURCE = "NVIDIA H200 profile 2026-12-02, CUDA-graph replays, geometric mean over 2 buckets (B 32-128, ctx 4096), " \
         "128 heads, latent 512+64, bf16"


def test_a_page_size_measured_clearly_faster_for_the_decode_backend_is_filled(faster_64):
    p = plan("deepseek-v3", "h200", profile=faster_64)
    assert p.ok and (p.prefill_backend, p.decode_backend) == ("sdpa", "triton_mla")
    assert p.settings["page_size"] == 64
    # 64: sqrt(900 * 1000) = 949 vs 447 at 16, 2.12x
    assert page_fill(p) == {"field": "page_size", "from": None, "to": 64, "rule": "page-size", "reason":
                            f"triton_mla decode measured 2.12x faster with 64-key pages than with 16 (949 vs 447 "
                            f"GB/s; {SOURCE}); accepted by sdpa and triton_mla"}


def test_ranking_compares_the_page_16_buckets_only(faster_64):
    p = plan("deepseek-v3", "h200", profile=faster_64)
    # mixed with the page-64 rows triton_mla would read (400*500*900*1000)**0.25 = 651 over 4 buckets
    assert p.why["decode"] == f"decode: triton_mla, 447 vs 31 GB/s (torch_native); {SOURCE}, 16-key pages"
    ranking = rank(parse_profile(profile(with_64())), DSV3, "decode", ["triton_mla", "torch_native"])
    assert [b.page_size for b in ranking.buckets] == [16, 16] and len(set(ranking.buckets)) == 2
    assert ranking.rates == pytest.approx({"triton_mla": (400 * 500) ** 0.5, "torch_native": (30 * 32) ** 0.5})


def test_a_fixed_page_size_ranks_by_its_own_buckets_and_stands(faster_64):
    p = plan("deepseek-v3", "h200", {"page_size": 64}, profile=faster_64)
    assert p.settings["page_size"] == 64 and not [a for a in p.adjustments if a["field"] == "page_size"]
    assert p.why["decode"] == ("decode: triton_mla, 949 vs 32 GB/s (torch_native); "
                               f"{SOURCE}, 64-key pages")
    p = plan("deepseek-v3", "h200", {"page_size": 32}, profile=faster_64)      # not measured: page 16's
    assert p.settings["page_size"] == 32 and not [a for a in p.adjustments if a["field"] == "page_size"]
    assert p.why["decode"].startswith("decode: triton_mla, 447 vs 31 GB/s (torch_native)")


def test_page_64_ranking_order_is_its_own(tmp_path):
    """At page 64 torch_native is (here) the faster: only a plan fixed at 64 sees it."""
    path = write(tmp_path / "flip.json", profile(with_64(rates=(20, 20), torch_rates=(31, 33))))
    assert plan("deepseek-v3", "h200", profile=path).decode_backend == "triton_mla"
    assert plan("deepseek-v3", "h200", {"page_size": 64}, profile=path).decode_backend == "torch_native"


@pytest.mark.parametrize("scale, size", [(1.12, 64), (1.08, 16), (0.5, 16)])
def test_the_margin_decides(tmp_path, scale, size):
    p = plan("deepseek-v3", "h200", profile=write(tmp_path / "p.json", profile(with_64(scale))))
    assert p.settings["page_size"] == size
    if size == 16:
        assert page_fill(p)["reason"] == "default 16, accepted by sdpa and triton_mla"
    else:
        assert page_fill(p)["reason"].startswith("triton_mla decode measured 1.12x faster with 64-key pages")


def test_a_chosen_backend_that_refuses_64_keeps_16(faster_64):
    decls = dict(declarations())            # a copy: the registry is cached
    sdpa = decls["sdpa"]
    decls["sdpa"] = dataclasses.replace(sdpa, capabilities=dataclasses.replace(sdpa.capabilities,
                                                                               page_sizes=(16, 32)))
    p = plan("deepseek-v3", "h200", registry=decls, profile=faster_64)
    assert (p.prefill_backend, p.decode_backend) == ("sdpa", "triton_mla")
    assert p.settings["page_size"] == 16 and page_fill(p)["reason"] == "default 16, accepted by sdpa and triton_mla"


def test_page_64_must_cover_the_same_buckets_and_be_ok(tmp_path):
    partial = PREFILL + AT_16 + decode("triton_mla", (900, 1000), 64)[1:]
    wrong = PREFILL + AT_16 + decode("triton_mla", (900, 1000), 64)[:1] + [
        entry("triton_mla", "decode", None, batch=128, context=4096, page_size=64, status="wrong", rel_err=0.5, **MLA)]
    for rows in (partial, wrong):
        p = plan("deepseek-v3", "h200", profile=write(tmp_path / "p.json", profile(rows)))
        assert p.settings["page_size"] == 16 and p.decode_backend == "triton_mla"
        assert not any("wrong" in w for w in p.warnings)        # a page-64 entry is not a page-16 failure


def test_a_decode_workload_compares_its_nearest_bucket(faster_64):
    p = plan("deepseek-v3", "h200", profile=faster_64, workload={"decode": {"batch": 100, "context": 4096}})
    assert page_fill(p)["reason"].startswith(
        "triton_mla decode measured 2.00x faster with 64-key pages than with 16 (1000 vs 500 GB/s; NVIDIA H200 "
        "profile 2026-12-02, CUDA-graph replays, B=128 ctx=4096, 128 heads, latent 512+64, bf16)")


def test_another_sm90_device_says_where_it_was_measured(faster_64):
    p = plan("deepseek-v3", "h100", profile=faster_64)
    assert p.settings["page_size"] == 64
    assert "(measured on NVIDIA H200, not on NVIDIA H100 80GB HBM3" in page_fill(p)["reason"]


def test_a_profile_of_one_page_size_changes_nothing(tmp_path):
    p = plan("deepseek-v3", "h200", profile=write(tmp_path / "p.json", profile(PREFILL + AT_16)))
    assert p.settings["page_size"] == 16 and page_fill(p)["reason"] == "default 16, accepted by sdpa and triton_mla"
    assert p.why["decode"] == ("decode: triton_mla, 447 vs 31 GB/s (torch_native); NVIDIA H200 profile 2026-12-02, "
                               "CUDA-graph replays, geometric mean over 2 buckets (B 32-128, ctx 4096), 128 heads, "
                               "latent 512+64, bf16")
