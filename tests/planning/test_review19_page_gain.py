"""Review 19 findings (page size by measurement). Each test states what a correct plan does;
they FAIL on main at 67471ad."""
import pytest
from profile_fakes import entry, only_given_profiles, profile, write  # noqa: F401 (a fixture)

from attnkit.planning.solver import plan

MLA = dict(kind="mla", heads=128, kv_heads=1, head_dim=192, mla=(512, 64))
BUCKETS = ((32, 4096), (128, 4096))


def decode(backend, rates, page):
    return [entry(backend, "decode", r, batch=b, context=c, page_size=page, **MLA)
            for r, (b, c) in zip(rates, BUCKETS)]


@pytest.mark.xfail(strict=True, reason="review19: plan not a fixed point of its page size")
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


@pytest.mark.xfail(strict=True, reason="review19: page-64 gain extrapolated to 64 heads")
def test_no_page_gain_claimed_for_a_shape_whose_kernel_differs(monkeypatch):
    monkeypatch.delenv("ATTNKIT_PROFILE", raising=False)     # the shipped H200 profile
    monkeypatch.setenv("ATTNKIT_PROFILE_DIR", "/nonexistent")
    """deepseek-v3 at tp 2 (64 heads a rank): triton_mla's auto variant is v2 below 128 heads
    (decode.auto_variant), not the Hopper 'ws' kernel that made 64-key pages faster in the
    128-head buckets; the shipped profile never measured 64 heads at page 64."""
    p = plan("deepseek-v3", "h200", {"tp_size": 2})
    fill = next(a for a in p.adjustments if a["field"] == "page_size")
    assert not fill["reason"].startswith("triton_mla decode measured"), fill["reason"]
