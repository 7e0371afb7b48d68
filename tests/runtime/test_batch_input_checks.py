"""build_batch turns malformed per-request inputs into AK405/AK406, never a raw TypeError."""
import pytest

from attnkit.backends.batch import Request, build_batch
from attnkit.errors import AttnkitError


def _raises(code, *args, **kwargs):
    with pytest.raises(AttnkitError) as err:
        build_batch(*args, **kwargs)
    assert err.value.code == code
    return err.value


def test_negative_encoder_len_is_rejected():
    err = _raises("AK405", [Request(0, 2, [0], encoder_len=-3, encoder_block_table=[1])],
                  page_size=4)
    assert "encoder_len" in err.message and "-3" in err.message
    assert err.field == "requests[0].encoder_len"


def test_unknown_mode_string_names_valid_modes():
    err = _raises("AK406", [Request(0, 2, [0])], page_size=4, mode="prefill")
    assert "'prefill'" in err.message
    for name in ("extend", "decode", "mixed", "verify", "idle"):
        assert name in err.message
    assert err.field == "mode"


@pytest.mark.parametrize("page", [2**31, 2**40])
def test_page_id_beyond_int32_names_value(page):
    err = _raises("AK405", [Request(0, 2, [page])], page_size=4)
    assert str(page) in err.message and "block_table" in err.field


def test_huge_encoder_page_id_rejected():
    err = _raises("AK405", [Request(0, 2, [0], encoder_len=2, encoder_block_table=[2**31])],
                  page_size=4)
    assert str(2**31) in err.message


@pytest.mark.parametrize("bad", [
    (0,),                                                  # too few fields
    (0, 1, [0], None, None, 9),                            # too many
    dict(prefix_len=0, num_new=1, block_table=[0], foo=1),
    dict(prefix_len=0, block_table=[0]),
    7,                                                      # not a request at all
])
def test_malformed_request_names_fields(bad):
    err = _raises("AK405", [bad], page_size=4)
    assert "prefix_len" in err.message and "num_new" in err.message and "block_table" in err.message
    assert err.field == "requests[0]"


@pytest.mark.parametrize("req, field", [
    ((0, 2.5, [0]), "num_new"),
    ((1.0, 2, [0, 1]), "prefix_len"),
    ((0, 2, None), "block_table"),
    ((0, 2, ["a"]), "block_table"),
    ((0, 2, [1.5]), "block_table"),
    (Request(0, 2, [0], encoder_len=2.0, encoder_block_table=[1]), "encoder_len"),
])
def test_non_integer_fields_rejected(req, field):
    err = _raises("AK405", [req], page_size=4)
    assert field in err.field


@pytest.mark.parametrize("page_size", [None, 2.0, "4"])
def test_non_integer_page_size_rejected(page_size):
    _raises("AK405", [Request(0, 2, [0])], page_size=page_size)
