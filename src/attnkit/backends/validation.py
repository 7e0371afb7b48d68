"""Runtime input checks, run before any kernel sees the inputs; backend-independent (what a
backend's declaration says is backends/envelope.py's).

Two entry points, both called automatically by ``AttentionBackend`` (see base.py):
  ``validate_batch(meta, cache)``  once per step (in ``prepare``): page size, devices, mode,
      and the block tables and slot mapping against the cache; what the metadata's builder
      already guarantees is not checked again (a derived slot mapping equals the tables',
      backends/tables.py), and the metadata's tensors are as built (``check_unchanged``).
  ``validate_forward(q, k, v, layer, cache, meta)``  per layer (in ``forward``): the layer spec
      (memoised), shapes, dtypes, devices and head counts of q/k/v and the layer's tensors.
      Metadata only, no device sync.
``validate_indexer`` checks a DSA layer's indexer inputs (AK448), per layer too.
Each failure is an AttnkitError (AK405, AK406, AK410-AK419, AK448, AK472) naming the field, expected
and actual. Host lists from the metadata are used so checks do not sync the device.
"""
from __future__ import annotations

from typing import Any

import torch

from attnkit.backends.metadata import BatchMetadata, ForwardMode
from attnkit.backends.step import Passed, RuntimeLayer
from attnkit.backends.tables import slots_of
from attnkit.errors import fail
from attnkit.kvcache.checks import same_device
from attnkit.kvcache.paged import COMPUTE_TORCH_DTYPES, PagedKVCache
from attnkit.model.checks import layer_problem
from attnkit.model.spec import LayerAttention



def _shape(name: str, t: Any, expected: tuple, *, code: str = "AK411") -> None:
    if not isinstance(t, torch.Tensor):
        fail(code, f"{name} must be a tensor of shape {list(expected)}, got {type(t).__name__}",
             field=name, expected=list(expected), actual=type(t).__name__)
    if t.shape != expected:                      # torch.Size compares equal to a tuple
        fail(code, f"{name} has shape {list(t.shape)}, expected {list(expected)}",
             field=name, expected=list(expected), actual=list(t.shape))


def _device(name: str, t: torch.Tensor | None, device: torch.device) -> None:
    if t is not None and not same_device(t.device, device):
        fail("AK412", f"{name} is on {t.device} but the KV cache is on {device}",
             field=name, expected=str(device), actual=str(t.device))


def _dtype(name: str, t: torch.Tensor, allowed: tuple) -> None:
    if t.dtype not in allowed:
        fail("AK410", f"{name} has dtype {t.dtype}, expected one of {[str(d) for d in allowed]}",
             field=name, expected=[str(d) for d in allowed], actual=str(t.dtype))


def _heads_tensor(name: str, t: Any, tokens: int, heads: int, dim: int, lid: int) -> None:
    """t must be [tokens, heads, dim]; a wrong head count gets its own code (AK413)."""
    if isinstance(t, torch.Tensor) and t.dim() == 3 and t.shape[1] != heads:
        fail("AK413", f"{name} has {t.shape[1]} heads but layer {lid} has {heads} "
                      f"{'query' if name == 'q' else 'KV'} heads (K/V are not repeated for GQA)",
             field=f"{name}.shape[1]", expected=heads, actual=t.shape[1])
    _shape(name, t, (tokens, heads, dim))


def validate_forward(q, k, v, layer, cache, meta: BatchMetadata) -> None:
    """``validate_layer`` then ``validate_tensors`` (AttentionBackend.forward checks the layer
    against the backend's declaration between the two)."""
    validate_layer(layer, cache)
    validate_tensors(q, k, v, layer, cache, meta)


def validate_layer(layer, cache) -> None:
    """The layer: a RuntimeLayer whose spec no rule refuses (once per spec), and whose buffers
    the cache holds."""
    _check_cache(cache)
    if not isinstance(layer, RuntimeLayer) or not isinstance(layer.spec, LayerAttention):
        fail("AK419", f"layer must be an RuntimeLayer(spec=LayerAttention(...)), got "
                      f"{type(layer).__name__}" + ("" if not isinstance(layer, RuntimeLayer)
                                                   else f" with spec {type(layer.spec).__name__}"),
             field="layer", expected="RuntimeLayer", actual=repr(layer)[:80])
    _check_spec(layer.spec)
    _check_cache_layer(layer, cache)


def validate_tensors(q, k, v, layer, cache, meta: BatchMetadata) -> None:
    """q: [T, H_q, D] (dual chunk layers: [T, 3, H_q, D]); k: [N, H_kv, D], v: [N, H_kv, D_v] (MLA: k [N, L + R], v None), with
    N = T, or for cross layers N = sum(encoder_lens) and k = v = None when already cached."""
    spec = layer.spec
    lid = spec.layer_id
    num_tokens = meta.num_tokens
    if spec.dual_chunk is not None:
        # dual chunk layers take three rotations of each query: [T, 3, H_q, D]
        if not isinstance(q, torch.Tensor) or q.dim() != 4 or q.shape[1] != 3:
            fail("AK472", f"dual chunk attention needs q as [T, 3, H_q, D] (intra, successor, "
                          f"inter variants) for layer {lid}, got "
                          f"{list(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__}",
                 field="q", expected=[num_tokens, 3, spec.num_heads, spec.head_dim],
                 actual=list(q.shape) if isinstance(q, torch.Tensor) else None)
        _shape("q", q, (num_tokens, 3, spec.num_heads, spec.head_dim))
    else:
        _heads_tensor("q", q, num_tokens, spec.num_heads, spec.head_dim, lid)
    _dtype("q", q, COMPUTE_TORCH_DTYPES)
    _device("q", q, cache.device)
    n_kv = num_tokens
    if spec.cross_attention:
        if k is None and v is None:
            _check_layer_tensors(layer, q)
            return
        n_kv = sum(meta.encoder_lens_cpu or [])
    if spec.kind == "mla":
        _shape("k (MLA latent)", k, (n_kv, spec.mla.latent_dim))
        if v is not None:
            fail("AK411", "MLA layers take the latent as k and v=None",
                 field="v", expected=None, actual=list(v.shape))
        named = (("k", k),)
    else:
        _heads_tensor("k", k, n_kv, spec.num_kv_heads, spec.head_dim, lid)
        _heads_tensor("v", v, n_kv, spec.num_kv_heads, spec.value_dim, lid)
        named = (("k", k), ("v", v))
    for name, t in named:
        if t.dtype != q.dtype:
            fail("AK410", f"{name} has dtype {t.dtype} but q has {q.dtype}",
                 field=name, expected=str(q.dtype), actual=str(t.dtype))
        _device(name, t, cache.device)
    _check_layer_tensors(layer, q)


_SPECS_PASSED = Passed()


def _check_spec(spec) -> None:
    if not _SPECS_PASSED.has((id(spec),), spec):
        _spec_problem(spec)
        _SPECS_PASSED.add((id(spec),), spec)


def _spec_problem(spec) -> None:
    """Values a LayerAttention can hold but no backend can serve (AK419; AK413 for a KV head
    count that does not divide the query heads, AK473 for a dual chunk config): the planner's rules
    (model/checks.py), and chunked local attention only on causal decoder layers. Checked once
    per spec object (``_check_spec``)."""
    problem = layer_problem(spec)
    chunk = spec.attention_chunk
    if problem is None and chunk is not None and spec.role != "decoder":
        problem = ("role", f"layer {spec.layer_id}: attention_chunk (chunked local attention) "
                           f"is causal by definition, so the layer's role must be 'decoder', not "
                           f"{spec.role!r}")
    if problem:
        field, why = problem
        code = {"num_kv_heads": "AK413", "dual_chunk": "AK473"}.get(field, "AK419")  # own codes
        fail(code, why, field=f"layer.spec.{field}", expected=f"a valid {field}",
             actual=repr(getattr(spec, field, None))[:80])


def _check_cache_layer(layer, cache) -> None:
    spec = layer.spec
    lid = spec.layer_id
    if spec.kind == "mla":
        buf = cache.latent.get(lid)
        expected = (cache.num_pages, cache.page_size, spec.mla.latent_dim) if spec.mla else None
    else:
        buf = cache.k.get(lid)
        expected = (cache.num_pages, cache.page_size, spec.num_kv_heads, spec.head_dim)
    if spec.sparse_topk is not None:
        index_buf = cache.index_k.get(lid)
        want_index = (cache.num_pages, cache.page_size, spec.sparse_topk.index_head_dim)
        if index_buf is None or tuple(index_buf.shape) != want_index:
            fail("AK418", f"layer {lid} is DSA (sparse_topk) but the KV cache has "
                          f"{'no indexer-key buffer' if index_buf is None else list(index_buf.shape)} "
                          f"for it; it needs index_k {list(want_index)} (a PagedKVCache built from "
                          "this spec has one)", field=f"cache.index_k[{lid}]", expected=list(want_index),
                 actual=None if index_buf is None else list(index_buf.shape))
    if buf is None:
        have = sorted(cache.latent if spec.kind == "mla" else cache.k)
        fail("AK418", f"the KV cache has no {spec.kind.upper()} buffer for layer {lid}",
             field="layer.layer_id", expected=have, actual=lid)
    checks = [(buf, expected)]
    if spec.kind != "mla":
        checks.append((cache.v[lid], (*expected[:3], spec.value_dim)))
    for have_buf, want in checks:
        if want is None or tuple(have_buf.shape) != want:
            fail("AK418", f"the cache buffer of layer {lid} has shape {list(have_buf.shape)}, but "
                          f"the layer needs {list(want) if want else '(no MLA config)'}",
                 field=f"cache[{lid}]", expected=list(want) if want else None,
                 actual=list(have_buf.shape))


def _check_layer_tensors(layer, q: torch.Tensor) -> None:
    """Shapes and devices of the per-layer tensors that are set; a missing one is left to
    the backend, which names what it needs (e.g. MLA weights)."""
    spec = layer.spec
    wanted = {"sinks": (spec.num_heads,)}
    if spec.kind == "mla":
        mla = spec.mla
        wanted["w_kc"] = (spec.num_heads, mla.qk_nope_head_dim, mla.kv_lora_rank)
        wanted["w_vc"] = (spec.num_heads, mla.kv_lora_rank, mla.v_head_dim)
    for name, shape in wanted.items():
        t = getattr(layer, name)
        if t is not None:
            _shape(f"layer.{name}", t, shape)
            _device(f"layer.{name}", t, q.device)


def validate_batch(meta: BatchMetadata, cache) -> None:
    """Once per step: the metadata fits the cache (page size, device, pages and slots). What
    ``BatchMetadata`` found when it was made (backends/tables.py ``TableFacts``) is read, not
    recomputed: a slot mapping derived from the tables is checked through the highest page
    they name; one handed in explicitly is compared with the tables, token by token."""
    if not isinstance(meta, BatchMetadata):
        fail("AK411", f"the batch metadata must be a BatchMetadata (build_batch), got "
                      f"{type(meta).__name__}", field="meta", expected="BatchMetadata",
             actual=type(meta).__name__)
    _check_cache(cache)
    meta.check_unchanged()
    if meta.page_size != cache.page_size:
        fail("AK418", f"batch built for page_size {meta.page_size}, cache has {cache.page_size}",
             field="meta.page_size", expected=cache.page_size, actual=meta.page_size)
    _device("meta.device", meta.slot_mapping, cache.device)
    _check_mode(meta)
    facts = meta._facts
    tables = meta.block_tables_cpu
    if facts.short is not None or facts.max_page >= cache.num_pages:
        _check_tables("meta.block_tables", tables, meta.seq_lens_cpu, cache)   # names the row
    if not facts.derived:
        expected = [s for row, p, n in zip(tables, meta.prefix_lens_cpu, meta.seq_lens_cpu)
                    for s in slots_of(row, range(p, n), cache.page_size)]
        _check_slots("meta.slot_mapping", meta.slot_mapping_cpu, expected, cache)
    elif facts.twice is not None:
        _slot_twice("meta.slot_mapping", facts.twice)
    if meta.encoder_lens_cpu is not None:
        _check_encoder(meta, cache)


def not_a_step(step) -> None:
    """forward was handed something other than the StepState that prepare returned (AK411)."""
    fail("AK411", f"forward takes the StepState that prepare returned, got {type(step).__name__}",
         field="step", expected="StepState (backend.prepare(meta, cache))", actual=repr(step)[:80])


def _check_cache(cache) -> None:
    if not isinstance(cache, PagedKVCache):
        fail("AK430", f"the KV cache must be a PagedKVCache, got {type(cache).__name__}",
             field="cache", expected="PagedKVCache", actual=repr(cache)[:80])


def _check_mode(meta: BatchMetadata) -> None:
    qlens = meta.query_lens_cpu
    if meta.mode is ForwardMode.DECODE and any(n != 1 for n in qlens):
        fail("AK406", f"DECODE step with new-token counts {qlens}; decode takes one per request",
             field="meta.mode", expected="one new token per request", actual=qlens)
    if (meta.mode is ForwardMode.IDLE) != (meta.num_reqs == 0):
        fail("AK406", f"mode {meta.mode.name} with {meta.num_reqs} request(s)",
             field="meta.mode", expected="IDLE exactly when the batch is empty", actual=meta.mode.name)


def _check_tables(name: str, tables: list[list[int]], lens: list[int], cache) -> None:
    for i, (row, n) in enumerate(zip(tables, lens)):
        need = row[:-(-n // cache.page_size)]
        bad = [p for p in need if not 0 <= p < cache.num_pages]
        if len(need) * cache.page_size < n or bad:
            fail("AK414", f"{name}[{i}] = {row} must name {-(-n // cache.page_size)} page(s) in "
                          f"[0, {cache.num_pages}) for {n} tokens; bad entries {bad}",
                 field=f"{name}[{i}]", expected=f"pages in [0, {cache.num_pages})", actual=list(row))


def _check_slots(name: str, slots: list[int], expected: list[int], cache) -> None:
    limit = cache.num_pages * cache.page_size
    for j, (s, e) in enumerate(zip(slots, expected)):
        if s != e or not 0 <= s < limit:
            fail("AK415", f"{name}[{j}] = {s}, but the token's block-table page and offset give "
                          f"slot {e} (cache slots are [0, {limit}))",
                 field=f"{name}[{j}]", expected=e, actual=s)
    if len(set(slots)) != len(slots):
        seen: set[int] = set()
        _slot_twice(name, next(s for s in slots if s in seen or seen.add(s)))


def _slot_twice(name: str, slot: int) -> None:
    fail("AK416", f"{name} writes slot {slot} more than once in one step",
         field=name, expected="distinct slots", actual=slot)


def _check_encoder(meta: BatchMetadata, cache) -> None:
    lens, tables = meta.encoder_lens_cpu, meta.encoder_block_tables_cpu
    _check_tables("meta.encoder_block_tables", tables, lens, cache)
    if meta.encoder_slot_mapping_cpu is not None:
        expected = [s for row, n in zip(tables, lens) for s in slots_of(row, range(n), cache.page_size)]
        if len(meta.encoder_slot_mapping_cpu) != len(expected):
            fail("AK411", f"meta.encoder_slot_mapping has {len(meta.encoder_slot_mapping_cpu)} "
                          f"slots for {len(expected)} encoder tokens",
                 field="meta.encoder_slot_mapping", expected=[len(expected)],
                 actual=[len(meta.encoder_slot_mapping_cpu)])
        _check_slots("meta.encoder_slot_mapping", meta.encoder_slot_mapping_cpu, expected, cache)


def validate_indexer(indexer, layer, cache, meta: BatchMetadata, q) -> None:
    """The DSA indexer inputs (backends/sparse.py) against the layer, once per layer call:
    present exactly when the layer has sparse_topk; q [T, H_i, D_i] in q's dtype, weights
    [T, H_i] float32, k [T, D_i] in q's dtype, all on the cache's device (AK448)."""
    from attnkit.backends.sparse import IndexerInputs

    sparse = layer.spec.sparse_topk
    lid = layer.spec.layer_id
    if sparse is None:
        if indexer is not None:
            fail("AK448", f"layer {lid} has no sparse_topk, so it takes no indexer inputs; got "
                          f"{type(indexer).__name__}", field="indexer", expected=None,
                 actual=type(indexer).__name__)
        return
    if not isinstance(indexer, IndexerInputs):
        fail("AK448", f"layer {lid} is DeepSeek sparse attention (sparse_topk={sparse.topk}): forward "
                      f"needs indexer=IndexerInputs(q, weights, k), got "
                      f"{'nothing' if indexer is None else type(indexer).__name__}",
             field="indexer", expected="IndexerInputs", actual=repr(indexer)[:80])
    t, h, d = meta.num_tokens, sparse.index_n_heads, sparse.index_head_dim
    for name, want, dtypes in (("q", (t, h, d), (q.dtype,)), ("weights", (t, h), (torch.float32,)),
                               ("k", (t, d), (q.dtype,))):
        tensor = getattr(indexer, name)
        _shape(f"indexer.{name}", tensor, want, code="AK448")
        if tensor.dtype not in dtypes:
            fail("AK448", f"indexer.{name} has dtype {tensor.dtype}, expected {dtypes[0]}",
                 field=f"indexer.{name}", expected=str(dtypes[0]), actual=str(tensor.dtype))
        _device(f"indexer.{name}", tensor, cache.device)
