"""What bench_prefill28.py and bench_batched28.py share to time the Gluon rows kernels alone on
a Setup's step (bench_triton.Setup; its keys already in the cache): the key rows the kernels
read (the step's packed k / v, or at a prefix the gathered padded copy), SDPA's output on the
same step, one kernel form checked against it before it is timed, and the rows' markdown table."""
from __future__ import annotations

import json

import torch
from bench_triton import rel_err, sdpa_peer, timed

from attnkit.backends.triton import tma_path


def step_rows(s):
    """(k_rows, v_rows, rows keywords, gather): rows keywords query_start_loc [B + 1],
    key_start [B], seq_lens [B] (int32, cuda); gather: the prefix's copy (a callable that
    redoes it, for its own timing) or None on a fresh step (the packed rows)."""
    from attnkit.backends.triton.gather_rows import gather_rows
    q_lens, kv_lens = list(s.meta.query_lens_cpu), list(s.meta.seq_lens_cpu)
    i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device="cuda")  # noqa: E731
    qsl, seq = i32([sum(q_lens[:i]) for i in range(len(q_lens) + 1)]), i32(kv_lens)
    if not s.prefix:
        return s.k, s.v, dict(query_start_loc=qsl, key_start=qsl[:-1], seq_lens=seq), None
    pad = tma_path.PAD
    lens = [-(-n // pad) * pad for n in kv_lens]
    key_start = i32([sum(lens[:i]) for i in range(len(lens))])
    bt = torch.as_tensor(s.meta.block_tables, device="cuda").to(torch.int32).contiguous()
    gather = lambda: gather_rows(s.cache.k[0], s.cache.v[0], block_tables=bt, key_start=key_start,  # noqa: E731
                                 seq_lens=seq, total_rows=sum(lens), longest=max(lens), pad=pad,
                                 dtype=s.q.dtype)
    k_rows, v_rows = gather()
    return k_rows, v_rows, dict(query_start_loc=qsl, key_start=key_start, seq_lens=seq), gather


def sdpa_reference(s) -> torch.Tensor:
    """[B * new, H * D] SDPA on the step's gathered keys (causal; lower-right at a prefix)."""
    k_c, v_c = s.gather()
    from torch.nn.attention.bias import causal_lower_right
    mask = causal_lower_right(s.new, s.prefix + s.new) if s.prefix else None
    return sdpa_peer(None, s.q_bhsd(), k_c, v_c, mask, not s.prefix,
                     expand=True)().transpose(1, 2).reshape(s.batch * s.new, -1)


def failed(exc) -> str:
    torch.cuda.synchronize()
    return f"n/a ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"


def checked_row(fn, out, ref, *, units, **row) -> dict:
    """Run ``fn`` (it writes ``out``), compare with ``ref``; time it only where right (rel err
    < 2e-2). -> ``row`` with err_vs_sdpa and attnkit (units(ms)) / attnkit_ms, or attnkit "n/a
    (...)": wrong, or what it raised (a form that fails to compile is a result)."""
    try:
        fn()
        err = rel_err(out.reshape(ref.shape), ref)
        row = dict(row, err_vs_sdpa=err)
        if err < 2e-2:
            ms = timed(fn)[0]
            row.update(attnkit=units(ms), attnkit_ms=ms, unit="TFLOP/s")
        else:
            row["attnkit"] = f"n/a (wrong: rel err {err:.3g})"
    except Exception as exc:  # noqa: BLE001 - one form failing must not stop the others
        row = dict(row, attnkit=failed(exc))
    return row


def cell(value) -> str:
    """A table cell: a rate rounded, a note as it is, nothing for a missing value."""
    return f"{value:.0f}" if isinstance(value, (int, float)) else ("" if value is None else str(value))


def column(key: str):
    """The cell of a row's ``key``."""
    return lambda row: cell(row.get(key))


PEER_COLUMNS = {"eager": column("attnkit_eager"), "cuDNN": column("sdpa_cudnn"),
                "flash": column("sdpa_flash")}


def md_table(jsonl: str, columns: dict) -> str:
    """The markdown table of a bench's rows (one JSON object a line): shape, variant,
    ``columns`` (title -> the cell of a row), err."""
    columns = {"shape": column("shape"), "variant": column("variant"), **columns,
               "err": lambda row: str(row.get("err_vs_sdpa", ""))}
    rows = [json.loads(x) for x in open(jsonl)]
    rule = ["---"] * 2 + ["---:"] * (len(columns) - 2)
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(fn(r) for fn in columns.values()) + " |" for r in rows]
    return "\n".join(lines)
