"""Per-step batch metadata, built once per step and shared by every layer.

Token order: requests are laid out one after another; request i owns query tokens
``query_start_loc[i] : query_start_loc[i+1]``. Its KV after this step has ``seq_lens[i]``
tokens, of which ``prefix_lens[i]`` were cached before the step; the new tokens are the
last ``seq_lens[i] - prefix_lens[i]`` positions (``extend_lens``).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class ForwardMode(enum.Enum):
    EXTEND = "extend"    # prefill, with or without a cached prefix
    DECODE = "decode"    # one new token per request
    MIXED = "mixed"      # extend and decode requests in one batch
    VERIFY = "verify"    # k draft tokens per request, causal among themselves
    IDLE = "idle"        # empty batch

    @property
    def is_decode(self) -> bool:
        return self is ForwardMode.DECODE

    @property
    def is_prefill_like(self) -> bool:
        """Modes served by a hybrid's prefill backend."""
        return self in (ForwardMode.EXTEND, ForwardMode.MIXED, ForwardMode.VERIFY)


@dataclass(slots=True)
class BatchMetadata:
    """Everything a backend needs about one step. Tensors live on the compute device.

    query_start_loc: [B+1] int32   cumulative new-token counts
    seq_lens:        [B]   int32   KV length after this step
    prefix_lens:     [B]   int32   KV length cached before this step
    block_tables:    [B, P] int32  page ids per request, row padded with -1
    slot_mapping:    [T]   int64   cache slot (page * page_size + offset) of each new token
    positions:       [T]   int64   absolute position of each new token
    encoder_lens:    [B]   int32 | None  encoder length per request (cross-attention)
    encoder_block_tables: [B, Pe] int32 | None  pages holding encoder K/V (cross-attention)
    encoder_slot_mapping: [Te] int64 | None  slots for encoder K/V written this step
    The *_cpu fields are host copies (python lists) so loops need no device sync;
    ``block_tables_cpu`` / ``encoder_block_tables_cpu`` / ``slot_mapping_cpu`` may be None
    when the metadata was built by hand (readers then fall back to ``.tolist()``).
    """
    mode: ForwardMode
    page_size: int
    query_start_loc: "object"
    seq_lens: "object"
    prefix_lens: "object"
    block_tables: "object"
    slot_mapping: "object"
    positions: "object"
    seq_lens_cpu: list[int]
    prefix_lens_cpu: list[int]
    query_lens_cpu: list[int]
    max_query_len: int
    max_seq_len: int
    encoder_lens: "object | None" = None
    encoder_block_tables: "object | None" = None
    encoder_slot_mapping: "object | None" = None
    encoder_lens_cpu: list[int] | None = None
    block_tables_cpu: list[list[int]] | None = None
    encoder_block_tables_cpu: list[list[int]] | None = None
    slot_mapping_cpu: list[int] | None = None

    @property
    def num_reqs(self) -> int:
        return len(self.seq_lens_cpu)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens_cpu)

    @property
    def has_encoder(self) -> bool:
        return self.encoder_lens is not None
