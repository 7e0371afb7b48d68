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
