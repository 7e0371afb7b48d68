"""A backend option outside its choices is an AttnkitError (AK407), not a ValueError."""
import pytest

from attnkit.errors import AttnkitError
from attnkit.registry import load_backend


@pytest.mark.parametrize("name", ["torch_native", "sdpa"])
def test_unknown_mla_form_is_ak407(name):
    with pytest.raises(AttnkitError) as info:
        load_backend(name, mla_form="absorb")
    assert info.value.code == "AK407"
    assert info.value.field == "mla_form" and "absorbed" in info.value.expected


def test_kernel_variants_are_also_named_by_what_they_do():
    from attnkit.backends.triton.backend import TritonBackend
    from attnkit.backends.triton_mla.backend import TritonMLABackend

    by_name = TritonBackend(extend_variant="new_kv_direct", decode_variant="separate_write")
    assert (by_name.extend_variant, by_name.decode_variant) == ("v2", "v1")
    by_name = TritonBackend(extend_variant="paged_kv", decode_variant="fused_write")
    assert (by_name.extend_variant, by_name.decode_variant) == ("v1", "v2")
    assert TritonMLABackend(variant="whole_rows").variant == "v1"
    assert TritonMLABackend(variant="column_split").variant == "v2"
    with pytest.raises(AttnkitError) as info:
        TritonBackend(decode_variant="fused_writes")      # a typo of a name
    assert info.value.code == "AK407" and "fused_write" in info.value.expected
    assert TritonBackend(decode_variant="merge_in_kernel").decode_variant == "fused"
    assert TritonBackend(extend_variant="dense_rows_tma").extend_variant == "tma"
    assert TritonBackend(decode_variant="split_merge").decode_variant == "fused"   # the declared name
    assert TritonMLABackend(variant="column_split_tma").variant == "tma"
