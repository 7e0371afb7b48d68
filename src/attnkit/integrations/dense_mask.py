"""A transformers attention mask as the requests of one attnkit step, exactly or AK491.

A causal attnkit backend computes, for a request whose KV sequence is keys K_0 .. K_{n-1}
and whose queries are its last t positions, the query at position p over K_{p-w+1} .. K_p
(w the layer's sliding window; all of K_0 .. K_p without one). transformers has applied RoPE
before the call, so positions decide only which keys a query sees: a query of the mask is
served exactly by any request in which it sits at a position whose window holds exactly the
keys the mask gives it, each once. ``plan_mask`` finds such requests for every query that
sees a key:

- A batch row's *storage* is the keys some query of the row sees, in order (left padding,
  unwritten cache slots and keys out of every window are gone). A query whose keys are the
  window at some storage position p is *regular*: a prompt's tokens, a decode step, a chunk
  over a cache, with or without left padding.
- Regular queries at consecutive positions, in query order, form one request over the
  storage pages (a *run*; a causal mask has one run per row).
- A regular query at a position another one holds (right padding: each padding query sees
  what the row's last real token sees; a bidirectional block: each of its queries sees the
  whole block) is a one-query request on the same pages, with its own copy of the last,
  partial page so that no slot is written twice in the step (a *shadow*).
- Other queries are laid into *chains*: requests holding their own copy of the keys, in an
  order in which each query's keys are a window. This serves right padding under a sliding
  window (the windows of the padding queries shrink: one chain, keys in reverse order) and
  packed sequences (one chain per sequence after the first).

Copies are bounded (``COPY_FACTOR`` times the call's dense keys, plus a page per shadow);
past that, or for a query that sees more keys than the layer's window holds, the mask is
AK491. Queries that see no key get no request and a zero output.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnkit.errors import fail

# An additive mask entry at or below this hides its key: exp(-1e4) is 0 in every float format
# (finfo.min, -inf, -1e9 and the classic -10000.0 all count as masked).
MASKED_AT = -1e4
COPY_FACTOR = 2     # chains may copy up to this many times the call's B * Lk dense keys


@dataclass(slots=True)
class Group:
    """One request of the step, in batch row ``row``: its KV sequence ``keys`` (key indices
    into Lk) and its queries (indices into Lq), which sit at the last len(queries) positions.
    The first ``shared`` positions live in the row's storage pages; ``shared`` is a multiple
    of the page size, or len(keys) when every key is in storage."""
    row: int
    keys: list[int]
    queries: list[int]
    shared: int


@dataclass(slots=True)
class MaskPlan:
    """storage[b]: the keys (indices into Lk) of row b's storage pages, in position order
    ([] when no request uses them); groups: the step's requests, in step order."""
    storage: list[list[int]]
    groups: list[Group] = field(default_factory=list)


def visible(mask: torch.Tensor, batch: int, q_len: int, kv_len: int) -> torch.Tensor:
    """mask: [B or 1, 1 or H, Lq, >= Lk] bool (True = attend) or additive float -> [B, Lq, Lk]
    bool. A mask longer than the keys is cut to them (as eager does). Additive masks must hold
    only 0 (attend) and very negative values (masked): attnkit adds no bias."""
    if not isinstance(mask, torch.Tensor) or mask.device.type == "meta":
        what = "a meta tensor" if isinstance(mask, torch.Tensor) else type(mask).__name__
        fail("AK491", f"attention_mask must be a 4D torch tensor (or None), got {what}",
             field="attention_mask", expected="torch.Tensor [B, 1, Lq, Lk] or None", actual=what)
    if (mask.dim() != 4 or mask.shape[-2] != q_len or mask.shape[-1] < kv_len
            or mask.shape[0] not in (1, batch)):
        fail("AK491", f"attention_mask has shape {list(mask.shape)}; expected [{batch}, 1, "
                      f"{q_len}, {kv_len}] (boolean, True = attend)", field="attention_mask",
             expected=[batch, 1, q_len, kv_len], actual=list(mask.shape))
    mask = mask[..., :kv_len]
    if mask.dtype == torch.bool:
        vis = mask
    elif mask.is_floating_point():
        vis = mask > MASKED_AT
        if bool((mask[vis] != 0).any()) or bool(mask.isnan().any()):
            fail("AK491", "attention_mask is an additive mask with biases (values other than 0 "
                          f"and <= {MASKED_AT:g}, such as -inf); attnkit backends add no bias: pass "
                          "a boolean mask (True = attend) or a 2D padding mask",
                 field="attention_mask", expected=f"0 or <= {MASKED_AT:g}", actual="other values")
    else:
        fail("AK491", f"attention_mask is a 4D {mask.dtype} tensor; transformers' 4D masks are "
                      "boolean (True = attend) or additive floats (0 / -inf): convert it with "
                      "mask.bool()", field="attention_mask.dtype", expected="bool or float",
             actual=str(mask.dtype))
    if vis.shape[1] > 1 and not bool((vis == vis[:, :1]).all()):
        fail("AK491", "attention_mask differs between heads; attnkit masks every head alike",
             field="attention_mask", expected="one mask for all heads", actual=list(mask.shape))
    return vis[:, 0].expand(batch, q_len, kv_len)


def plan_unmasked(batch: int, q_len: int, kv_len: int) -> MaskPlan:
    """No mask: one query sees all Lk keys; Lq > 1 queries are causal from key 0 (SDPA's
    is_causal, which transformers relies on only when there is no padding)."""
    if q_len == 0:
        return MaskPlan(storage=[[] for _ in range(batch)])
    if q_len > kv_len:
        fail("AK491", f"{q_len} queries but only {kv_len} keys and no mask: a causal layer's "
                      "queries are among its keys", field="key.shape[2]", expected=f">= {q_len}",
             actual=kv_len)
    n_keys = kv_len if q_len == 1 else q_len
    keys = list(range(n_keys))
    return MaskPlan(storage=[keys] * batch,
                    groups=[Group(b, keys, list(range(q_len)), n_keys) for b in range(batch)])


def plan_mask(vis: torch.Tensor, *, window: int | None, page_size: int) -> MaskPlan:
    """vis: [B, Lq, Lk] bool. The requests that compute every query over exactly its keys."""
    batch, q_len, kv_len = vis.shape
    ar = torch.arange(kv_len, device=vis.device)
    sees = vis.any(-1)                                                    # [B, Lq]
    last = torch.where(vis, ar, -1).amax(-1)                              # [B, Lq] last key seen
    stored = vis.any(1)                                                   # [B, Lk]
    spos = stored.long().cumsum(-1) - 1                                   # storage position
    pos = spos.gather(1, last.clamp(min=0))                               # [B, Lq]
    kp, qp = spos[:, None, :], pos[:, :, None]
    window_keys = stored[:, None, :] & (kp <= qp)
    if window is not None:
        window_keys &= kp > qp - window
    regular = sees & (window_keys == vis).all(-1)
    plan = MaskPlan(storage=[[] for _ in range(batch)])
    budget = _Budget(COPY_FACTOR * batch * kv_len + page_size * int(sees.sum()))
    for b, (reg_b, pos_b, sees_b) in enumerate(zip(regular.tolist(), pos.tolist(), sees.tolist())):
        keys = stored[b].nonzero().flatten().tolist()
        odd = [i for i in range(q_len) if sees_b[i] and not reg_b[i]]
        if any(reg_b):
            plan.storage[b] = keys
            _runs_and_shadows(plan, b, keys, reg_b, pos_b, page_size, budget)
        if odd:
            _chains(plan, b, vis[b], odd, window, budget)
    return plan


class _Budget:
    """Keys copied beyond the rows' storage; AK491 past ``limit``."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0

    def spend(self, n: int, row: int, query: int) -> None:
        self.used += n
        if self.used > self.limit:
            fail("AK491", f"attention_mask: computing every query over exactly its keys needs "
                          f"more than {self.limit} copied keys (batch row {row}, query {query}); "
                          "a causal mask with left padding needs none, right padding a few "
                          "pages: pass such a mask (tokenizer.padding_side='left') or use a "
                          "transformers implementation (attn_implementation='eager' or 'sdpa') "
                          "for this mask", field="attention_mask",
                 expected=f"<= {self.limit} copied keys", actual=self.used)


def _runs_and_shadows(plan: MaskPlan, b: int, keys: list[int], regular: list[bool],
                      pos: list[int], page_size: int, budget: _Budget) -> None:
    """Regular queries of row b: runs over the storage pages, shadows for taken positions."""
    taken: set[int] = set()
    run: Group | None = None
    for i, p in enumerate(pos):
        if not regular[i]:
            continue
        if p in taken:
            shared = p // page_size * page_size
            budget.spend(p + 1 - shared, b, i)
            plan.groups.append(Group(b, keys[:p + 1], [i], shared))
            continue
        taken.add(p)
        if run is not None and p == len(run.keys):
            run.keys.append(keys[p])
            run.queries.append(i)
            run.shared += 1
        else:
            run = Group(b, keys[:p + 1], [i], p + 1)
            plan.groups.append(run)


@dataclass(slots=True)
class _Chain:
    keys: list[int]
    members: set[int]         # every key in the chain
    last: set[int]            # the keys its last query sees
    queries: list[int]


def _chains(plan: MaskPlan, b: int, vis_b: torch.Tensor, odd: list[int], window: int | None,
            budget: _Budget) -> None:
    """Irregular queries of row b (vis_b: [Lq, Lk]) as chains, smallest key sets first."""
    sets = [(set(vis_b[i].nonzero().flatten().tolist()), i) for i in odd]
    sets.sort(key=lambda s: (len(s[0]), s[1]))
    chains: list[_Chain] = []
    for keys, i in sets:
        for chain in reversed(chains):
            new = _extension(chain, keys, window)
            if new is not None:
                chain.keys.append(new)
                chain.members.add(new)
                chain.last = keys
                chain.queries.append(i)
                budget.spend(1, b, i)
                break
        else:
            if window is not None and len(keys) > window:
                _too_many(vis_b, b, i, keys, window)
            chains.append(_Chain(sorted(keys), set(keys), keys, [i]))
            budget.spend(len(keys), b, i)
    plan.groups += [Group(b, c.keys, c.queries, 0) for c in chains]


def _extension(chain: _Chain, keys: set[int], window: int | None) -> int | None:
    """The key that, appended to ``chain``, makes the window at the new last position exactly
    ``keys``; None if there is none."""
    new = keys - chain.last
    if len(new) != 1:
        return None
    (key,) = new
    if key in chain.members:
        return None
    want = chain.last | new
    n = len(chain.keys)                       # the new key's position
    if window is not None and n - window >= 0:
        want = want - {chain.keys[n - window]}
    return key if want == keys else None


def _too_many(vis_b: torch.Tensor, b: int, i: int, keys: set[int], window: int) -> None:
    seen = sorted(keys)
    hint = (f"the mask has no sliding window of {window}; transformers hands a custom 4D "
            "attention_mask unchanged to every layer: pass a dict of 4D masks by layer type "
            "({'full_attention': ..., 'sliding_attention': ...}), or a 2D padding mask")
    fail("AK491", f"attention_mask: batch row {b}, query {i} sees {len(seen)} keys "
                  f"{_short(seen)}, more than this layer's sliding window of {window} lets one "
                  f"query see ({hint})", field="attention_mask",
         expected=f"at most {window} keys per query",
         actual={"row": b, "query": i, "keys": _short(seen)})


def _short(idx: list[int]) -> str:
    return str(idx) if len(idx) <= 8 else f"[{idx[0]} .. {idx[-1]}] ({len(idx)} keys)"
