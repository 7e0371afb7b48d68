"""triton's batch_invariant option refuses the choices that would bring batch dependence back
(AK407 when the backend is made), and fixes the general kernels and the split size."""
from __future__ import annotations

import pytest

from attnkit.errors import AttnkitError
from attnkit.registry import load_backend
from attnkit.registry.kernels import KernelTable

pytest.importorskip("triton")


@pytest.mark.parametrize("options", [
    {"decode_variant": "v2"}, {"decode_variant": "fused"}, {"extend_variant": "tma"},
    {"extend_variant": "v2"}, {"num_splits": 4},
    {"kernels": {"decode": KernelTable.only("decode", "split_write")}}])
def test_batch_dependent_choices_are_refused(options):
    with pytest.raises(AttnkitError) as err:
        load_backend("triton", batch_invariant=True, **options)
    assert err.value.code == "AK407"


def test_split_keys_and_num_splits_are_exclusive():
    with pytest.raises(AttnkitError) as err:
        load_backend("triton", split_keys=64, num_splits=2)
    assert err.value.code == "AK407"


def test_defaults_are_the_general_kernels_and_fixed_splits():
    b = load_backend("triton", batch_invariant=True)
    assert b.split_keys == 256
    assert {role: t.fallback for role, t in b.kernels.items()} == {
        "prefill": ("paged",), "extend": ("paged",), "decode": ("split",)}
