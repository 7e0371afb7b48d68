"""triton's batch_invariant option: the variants that declare batch_invariant (split_fixed,
paged_fixed) spelled as one option; it refuses the choices that would bring batch dependence
back (AK407 when the backend is made)."""
from __future__ import annotations

import pytest

from attnkit.errors import AttnkitError
from attnkit.registry import load_backend
from attnkit.registry.kernels import KernelTable

pytest.importorskip("triton")


@pytest.mark.parametrize("options", [
    {"decode_variant": "v2"}, {"decode_variant": "fused"}, {"decode_variant": "split"},
    {"extend_variant": "tma"}, {"extend_variant": "v2"}, {"extend_variant": "paged"}, {"num_splits": 4},
    {"kernels": {"decode": KernelTable.only("decode", "split_write")}}])
def test_batch_dependent_choices_are_refused(options):
    with pytest.raises(AttnkitError) as err:
        load_backend("triton", batch_invariant=True, **options)
    assert err.value.code == "AK407"


def test_split_keys_and_num_splits_are_exclusive():
    with pytest.raises(AttnkitError) as err:
        load_backend("triton", split_keys=64, num_splits=2)
    assert err.value.code == "AK407"


def test_the_option_runs_the_declared_variants():
    from attnkit.backends.triton.configs import split_keys
    from attnkit.backends._triton import interpreting

    b = load_backend("triton", batch_invariant=True)
    assert b.split_keys == split_keys(interpret=interpreting())
    assert {role: t.fallback for role, t in b.kernels.items()} == {
        "prefill": ("paged_fixed",), "extend": ("paged_fixed",), "decode": ("split_fixed",)}
    same = load_backend("triton", extend_variant="paged_fixed", decode_variant="split_fixed")
    assert {r: t.fallback for r, t in same.kernels.items()} == {r: t.fallback for r, t in b.kernels.items()}
