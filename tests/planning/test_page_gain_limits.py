"""Limits of page size by measurement (planning/page_gain.py), found by a review: the plan is a
fixed point of the page size it fills, and a gain is not carried to a shape it was not measured
on. Both failed before the fix (main at 67471ad)."""
import pytest
from profile_fakes import entry, only_given_profiles, profile, write  # noqa: F401 (a fixture)

from attnkit.planning.solver import plan

MLA = dict(kind="mla", heads=128, kv_heads=1, head_dim=192, mla=(512, 64))
BUCKETS = ((32, 4096), (128, 4096))


def decode(backend, rates, page):
    return [entry(backend, "decode", r, batch=b, context=c, page_size=page, **MLA)
            for r, (b, c) in zip(rates, BUCKETS)]


@pytest.mark.usefixtures("only_given_profiles")
def test_plan_is_a_fixed_point_of_its_own_page_size(tmp_path):
    """triton_mla wins at 16 and is 1.2x faster at 64, where torch_native beats it 3x. The
    plan fills 64 yet keeps the page-16 winner; fed its own page size back, the plan changes."""
    rows = (decode("triton_mla", (400, 500), 16) + decode("torch_native", (300, 300), 16)
            + decode("triton_mla", (480, 600), 64) + decode("torch_native", (1500, 1500), 64))
    path = write(tmp_path / "p.json", profile(rows))
    free = plan("deepseek-v3", "h200", profile=path)
    fixed = plan("deepseek-v3", "h200", {"page_size": free.settings["page_size"]}, profile=path)
    assert (free.decode_backend, free.settings["page_size"]) == (fixed.decode_backend, fixed.settings["page_size"])


@pytest.mark.usefixtures("only_given_profiles")
def test_no_page_gain_claimed_for_a_shape_whose_kernel_differs(tmp_path):
    """Measured at 128 heads only (2x faster at 64): deepseek-v3 at tp 2 has 64 heads a rank,
    where triton_mla runs another kernel (decode.auto_variant: ws needs >= 128), and fp16 is
    another dtype (ws needs bf16): neither gets 64; tp 1 in bf16 does."""
    rows = decode("triton_mla", (400, 500), 16) + decode("triton_mla", (800, 1000), 64)
    path = write(tmp_path / "p.json", profile(rows))
    assert plan("deepseek-v3", "h200", profile=path).settings["page_size"] == 64
    for settings in ({"tp_size": 2}, {"dtype": "fp16"}):
        p = plan("deepseek-v3", "h200", settings, profile=path)
        fill = next(a for a in p.adjustments if a["field"] == "page_size")
        assert p.settings["page_size"] == 16 and fill["reason"].startswith("default 16"), (settings, fill)


def test_shipped_profile_fills_64_only_for_the_measured_shape(monkeypatch):
    """The shipped H200 profile: deepseek-v3 at tp 1 fills 64; kimi-k2 (64 heads) and tp 2 stay 16."""
    monkeypatch.delenv("ATTNKIT_PROFILE", raising=False)
    monkeypatch.setenv("ATTNKIT_PROFILE_DIR", "/nonexistent")
    assert plan("deepseek-v3", "h200").settings["page_size"] == 64
    assert plan("deepseek-v3", "h200", {"tp_size": 2}).settings["page_size"] == 16
    assert plan("kimi-k2", "h200").settings["page_size"] == 16
