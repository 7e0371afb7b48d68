import pytest
import torch

from attnkit.backends.batch import Request, build_batch, infer_mode
from attnkit.backends.metadata import ForwardMode
from attnkit.errors import AttnkitError


def test_mixed_batch_fields():
    meta = build_batch([Request(0, 5, [7, 2]), (6, 1, [4, 9, 1])], page_size=4)
    assert meta.mode is ForwardMode.MIXED
    assert meta.query_start_loc.tolist() == [0, 5, 6]
    assert meta.seq_lens.tolist() == [5, 7] and meta.prefix_lens.tolist() == [0, 6]
    assert meta.block_tables.tolist() == [[7, 2, -1], [4, 9, 1]]
    assert meta.block_tables.dtype == torch.int32 and meta.slot_mapping.dtype == torch.int64
    # request 0: positions 0..4 -> page 7 offsets 0..3, page 2 offset 0; request 1: position 6
    assert meta.slot_mapping.tolist() == [28, 29, 30, 31, 8, 38]
    assert meta.positions.tolist() == [0, 1, 2, 3, 4, 6]
    assert list(meta.slot_mapping_cpu) == meta.slot_mapping.tolist()
    assert (meta.max_query_len, meta.max_seq_len, meta.num_tokens, meta.num_reqs) == (5, 7, 6, 2)


@pytest.mark.parametrize("reqs, mode", [
    ([], ForwardMode.IDLE),
    ([(3, 1, [0]), (1, 1, [1])], ForwardMode.DECODE),
    ([(0, 1, [0])], ForwardMode.EXTEND),                  # one-token prompt is a prefill
    ([(0, 4, [0]), (2, 3, [1, 2])], ForwardMode.EXTEND),
    ([(0, 4, [0]), (2, 1, [1])], ForwardMode.MIXED),
])
def test_mode_inference(reqs, mode):
    assert infer_mode([Request.of(r) for r in reqs]) is mode
    assert build_batch(reqs, page_size=4).mode is mode


def test_idle_batch_is_empty():
    meta = build_batch([], page_size=16)
    assert meta.num_tokens == 0 and meta.block_tables.shape == (0, 0)
    assert meta.query_start_loc.tolist() == [0]


def test_verify_only_when_asked():
    reqs = [(8, 3, [0, 1]), (2, 3, [2])]
    assert build_batch(reqs, page_size=8).mode is ForwardMode.EXTEND
    assert build_batch(reqs, page_size=8, mode="verify").mode is ForwardMode.VERIFY


@pytest.mark.parametrize("reqs, mode, code", [
    ([(3, 2, [0, 1])], ForwardMode.DECODE, "AK406"),
    ([(3, 1, [0])], ForwardMode.IDLE, "AK406"),
    ([], ForwardMode.EXTEND, "AK406"),
    ([(3, 0, [0])], None, "AK405"),
    ([(-1, 2, [0])], None, "AK405"),
    ([(3, 2, [0])], None, "AK405"),                       # 5 tokens need 2 pages of 4
    ([(3, 2, [0, -1])], None, "AK405"),
])
def test_bad_requests(reqs, mode, code):
    with pytest.raises(AttnkitError) as err:
        build_batch(reqs, page_size=4, mode=mode)
    assert err.value.code == code


def test_encoder_fields():
    reqs = [Request(0, 2, [0], encoder_len=5, encoder_block_table=[3, 6]),
            Request(4, 1, [1, 2], encoder_len=1, encoder_block_table=[5])]
    cached = build_batch(reqs, page_size=4)
    assert cached.encoder_lens.tolist() == [5, 1] and cached.encoder_slot_mapping is None
    assert cached.encoder_block_tables.tolist() == [[3, 6], [5, -1]]
    written = build_batch(reqs, page_size=4, encoder="write")
    assert written.encoder_slot_mapping.tolist() == [12, 13, 14, 15, 24, 20]
