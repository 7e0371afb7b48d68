"""Launch configurations of the triton backend's kernel variants, as torch-free data.

The tiles are the winners of the sweeps benchmarks/NOTES-triton.md and NOTES-hopper.md record
(checked with ptxas for spills); the kernels read them from here and so does the planner, which
prints each role's configuration next to its variant (``launch_config``). Which variant runs is
the plan's (its kernel tables); these are only the shape each variant launches with.
"""
from __future__ import annotations


def padded(d: int) -> int:
    """Block width for a head dim: the next power of two, at least 16 (tl.dot's minimum)."""
    return max(16, 1 << (max(d, 1) - 1).bit_length())


# Split-KV decode launch shapes by padded head dim (16-bit compute): BLOCK_N keys a tile,
# warps, pipeline stages, and where given the kernel's switches (absent: off): PACK, KV heads a
# program (decode.decode_pack: where the layer's KV heads divide by it and a token's rows of
# adjacent heads are adjacent, else 1); EDGE_MASK, bounds and window masks on the first and
# last tile of a split only; PDL, the split reduction launched as a programmatic dependent
# of the split kernel (griddepcontrol, sm_90+; never under the interpreter). NOTES-triton.md, version 5, records the sweep each entry comes
# from (benchmarks/sweep_decode.py).
DECODE_TILES = {
    64: dict(BLOCK_N=32, num_warps=4, num_stages=5, PACK=2),
    128: dict(BLOCK_N=64, num_warps=4, num_stages=4),
    256: dict(BLOCK_N=16, num_warps=4, num_stages=5),
}


# (padded head dim, variant) -> what that variant launches with instead of DECODE_TILES' entry
# (split_write / split_merge carry the fused write: more registers, other tiles pay).
DECODE_VARIANT_TILES: dict[tuple[int, str], dict] = {
    (256, "split"): dict(BLOCK_N=16, num_warps=2, num_stages=5),
    # split_heads (decode_heads.py): one page of every KV head a tile, 8 warps (the [H_kv, 16,
    # D] accumulator), 5 stages: two page buffers (NOTES-triton.md, version 6)
    (64, "split_heads"): dict(BLOCK_N=16, num_warps=8, num_stages=5),
    (128, "split_heads"): dict(BLOCK_N=16, num_warps=8, num_stages=5),
}


# The stream decode (decode_stream.py, Gluon, 16-bit only): BLOCK_N keys a tile, NUM_STAGES
# ring slots of K + V tiles (d128 64 keys x 4, d64 128 x 4: 128 KB in flight a program, one
# program an SM), FUSED_WRITE (the kernel writes the new K/V: one launch fewer), maxnreg
# (absent: Triton's default; 128 lets two programs share an SM), EARLY (every load before the
# first tile issued at once, the new key folded in first: NOTES-triton.md version 8; on at d128,
# where gpu_decodeb16_verify.sh measured it faster at every row, 2026-12-02: B=16 1k +3 %,
# results/session-1202f/c1; d64 not yet timed with it, off). The tiles are the fastest of
# version 7's sweep at B=16 (results/decodeb16).
DECODE_STREAM_TILES = {
    64: dict(BLOCK_N=128, NUM_STAGES=4, FUSED_WRITE=True, EARLY=False),
    128: dict(BLOCK_N=64, NUM_STAGES=4, FUSED_WRITE=True, EARLY=True),
}
# its split rule (decode_stream.stream_splits): splits only where the (request, KV head) pairs
# leave SMs idle, as many as fill them, each at least ``min_keys`` keys
DECODE_STREAM_RULE = dict(min_keys=256)


def decode_config(head_dim: int, fp32: bool, *, interpret: bool, variant: str = "split") -> dict:
    """Split-KV decode: key tile and launch shape for a head dim and decode variant (split,
    split_write, split_merge, split_heads, stream; fp32: "ieee" dots). stream runs on a GPU
    in 16-bit only: its tile whatever ``interpret`` and ``fp32`` say."""
    if variant == "stream":
        return dict(DECODE_STREAM_TILES[128 if head_dim > 64 else 64])
    if interpret:
        return dict(BLOCK_N=16, num_warps=4, num_stages=1)
    if fp32:
        return dict(BLOCK_N=32, num_warps=4, num_stages=2)
    width = min(max(padded(head_dim), 64), 256)
    return dict(DECODE_VARIANT_TILES.get((width, variant), DECODE_TILES[width]))


def split_keys(*, interpret: bool) -> int:
    """Keys per split of the split_fixed decode (rounded up to whole BLOCK_N tiles): a fixed
    size, never derived from the batch or the SM count. 256 is choose_splits' floor, where the
    merge stops paying for the parallelism; the interpreter's 32 gives its short test requests
    several splits."""
    return 32 if interpret else 256


def extend_config(head_dim: int, fp32: bool, *, interpret: bool, variant: str = "v1") -> dict:
    """Paged extend ("v1") and new-K/V extend ("v2"): blocks and launch shape."""
    if interpret:
        return dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)
    if fp32:                          # "ieee" products on CUDA cores; keep the tiles small
        return dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)
    if padded(head_dim) > 128:
        return dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2)
    if variant == "v2" and padded(head_dim) in (64, 128):
        # d128: with 4 warps the 128 x 128 fp32 accumulator leaves no registers (ptxas for
        # sm_90 spills); 8 warps: no spills. d64: 8 warps beat 4 (NOTES-triton.md).
        return dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3)


def tma_config(head_dim: int, *, interpret: bool) -> dict:
    """The tensor-descriptor kernel: BLOCK_M, BLOCK_N (<= the row padding, 128), WS (warp
    specialisation), FUSED_SCALE (the scale folded into the exp2), GLUON (run prefill_gluon.py
    on the direct route: the gluon variant sets it), warps, stages (NOTES-hopper.md: d <= 64
    64 x 128 fused-scale tiles, else 128 x 64; no warp specialisation, which was slower and
    wrong at 3 stages)."""
    if interpret:
        return dict(BLOCK_M=16, BLOCK_N=16, WS=False, FUSED_SCALE=False, GLUON=False,
                    num_warps=4, num_stages=1)
    if head_dim <= 64:
        return dict(BLOCK_M=64, BLOCK_N=128, WS=False, FUSED_SCALE=True, GLUON=False,
                    num_warps=4, num_stages=3)
    if head_dim > 128:
        return dict(BLOCK_M=128, BLOCK_N=64, WS=False, FUSED_SCALE=False, GLUON=False,
                    num_warps=8, num_stages=2)
    return dict(BLOCK_M=128, BLOCK_N=64, WS=False, FUSED_SCALE=False, GLUON=False, num_warps=8,
                num_stages=3)


# The split-KV decode's split rule (decode.choose_splits; the split count itself follows the
# device's SM count at run time): programs for ``waves`` waves of the SMs in splits of at least
# ``min_keys`` keys (below that the merge costs more than the parallelism gains), at most
# ``max_splits``; where the (request, KV head) pairs fill at most half the SMs, ``few_waves``
# waves of splits of at least ``few_min_keys`` keys. The sweeps that chose it: NOTES-triton.md
# (version 5), results/sweep_hopper.md and results/sweep_decode.md.
DECODE_SPLIT_RULE = dict(waves=2, min_keys=256, max_splits=64, few_waves=3, few_min_keys=64)
# split_heads' split rule (decode_heads.heads_splits): a request's programs are its splits, so
# ``programs_per_sm`` programs an SM over the batch (one: 8 warps of ~200 registers fill an
# SM's register file), splits of at least ``min_keys`` keys.
DECODE_HEADS_RULE = dict(programs_per_sm=1, min_keys=64)

# The Gluon ping-pong prefill: D -> (BN keys a tile, K slots, V slots), 128 query rows a
# program (two warpgroups of 64), 12 warps (NOTES-hopper.md, sweep_hopper_gluon_v6.md).
GLUON_TILES = {64: (128, 4, 4), 128: (128, 4, 2), 256: (64, 2, 2)}
# The varlen Gluon variants' work order (HEAD_MAJOR: a head's blocks one after another, so the
# programs running at once share its K / V in L2; else heads fastest, the causal prefill's
# order), the winners of benchmarks/sweep_dit.py on the H200 (NOTES-hopper.md version 9 and
# results/sweep_dit.md hold the rates): one program a block, head-major; persistent, heads
# fastest. Which variant runs where is the profile's (attnkit tune).
VARLEN_GLUON_HEAD_MAJOR = True
VARLEN_PERSISTENT_HEAD_MAJOR = False
# varlen_gluon_split (the persistent kernel with the split tail): head-major, the faster order of
# the two in gpu_flux.sh's FLUX sweep (NOTES-hopper.md version 11 holds the rates)
VARLEN_SPLIT_HEAD_MAJOR = True
VARLEN_PERSISTENT_PROGRAMS_PER_SM = 1     # the rings take ~224 KB: one program fits an SM
# The causal rows forms (prefill_gluon_rows.py: batched fresh prefills, cached prefixes): the
# prefill kernel's tiles; gluon_rows_persistent runs this many programs an SM (one fits).
GLUON_ROWS_VARIANTS = ("gluon_rows", "gluon_rows_persistent", "gluon_rows_chain")
GLUON_ROWS_PROGRAMS_PER_SM = 1
# gluon_rows_chain (prefill_gluon_chain.py: two Q buffers, so a d128 ring of 3 K + 2 V slots
# fits 227 KB; d256's two 64 KB Q buffers leave no ring: not served): its tiles and the walk's
# schedule (rows_schedule.py; item_cost: the tiles' worth each item pays once in its model).
# NOTES-hopper.md version 13: written before its first GPU round, to be set by its measurements.
GLUON_CHAIN_TILES = {64: (128, 4, 4), 128: (128, 3, 2)}
GLUON_CHAIN_SCHEDULE = dict(kind="lpt", item_cost=1.0)
# Its loader writes a packed fresh step's K/V into the cache (whole pages by TMA from the ring,
# the rows of a last partial page copied) instead of the backend's separate write kernel.
GLUON_CHAIN_WRITE = True
# Its compute partitions read each item's geometry as one row of a host table (tma_path.
# chain_geometry), the next item's row loaded at the top of the current one, instead of three
# dependent rounds of loads at every item's top (NOTES-hopper.md version 14: 4 % of the
# kernel's warp samples at 8 x 2k). Off until measured faster.
GLUON_CHAIN_GEO = False
# Its compute warpgroups store a finished item's 64 rows, where all are the request's, through
# their rows of the item's Q buffer by one TMA store instead of 32 four-byte stores a thread
# (version 14: ~2 % of the kernel's warp samples stalled on the store queue). Off until measured.
GLUON_CHAIN_STORE_TMA = False


def gluon_rows_config(head_dim: int, *, persistent: bool, chain: bool = False) -> dict | None:
    """The gluon_rows variants: the prefill kernel's tiles and, persistent, programs per SM;
    chain (gluon_rows_chain, persistent): its tiles, SCHEDULE (rows_schedule.schedule's
    kind / item_cost) and FUSED_WRITE (the kernel writes a packed step's K/V)."""
    tiles = GLUON_CHAIN_TILES if chain else GLUON_TILES
    if head_dim not in tiles:
        return None
    bn, ks, vs = tiles[head_dim]
    cfg = dict(BLOCK_M=128, BLOCK_N=bn, K_SLOTS=ks, V_SLOTS=vs)
    if persistent or chain:
        cfg["PROGRAMS_PER_SM"] = GLUON_ROWS_PROGRAMS_PER_SM
    if chain:
        cfg["SCHEDULE"] = dict(GLUON_CHAIN_SCHEDULE)
        cfg["FUSED_WRITE"] = GLUON_CHAIN_WRITE
    return cfg | dict(num_warps=12)


def varlen_config(head_dim: int, fp32: bool, *, interpret: bool) -> dict:
    """The varlen tile kernel (triton/varlen.py): blocks and launch shape."""
    if interpret:
        return dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)
    if fp32:
        return dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)
    if padded(head_dim) > 128:
        return dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2)
    return dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)


def varlen_gluon_config(head_dim: int, *, persistent: bool, split_tail: bool = False) -> dict | None:
    """The varlen Gluon variants: the prefill kernel's tiles, the work order and, persistent,
    the programs per SM and whether the last wave's items are split along the keys
    (prefill_gluon_attention's tiles / head_major / programs / split_tail)."""
    if head_dim not in GLUON_TILES:
        return None
    bn, ks, vs = GLUON_TILES[head_dim]
    order = (VARLEN_SPLIT_HEAD_MAJOR if split_tail else VARLEN_PERSISTENT_HEAD_MAJOR) if persistent \
        else VARLEN_GLUON_HEAD_MAJOR
    cfg = dict(BLOCK_M=128, BLOCK_N=bn, K_SLOTS=ks, V_SLOTS=vs, HEAD_MAJOR=order)
    if persistent:
        cfg["PROGRAMS_PER_SM"] = VARLEN_PERSISTENT_PROGRAMS_PER_SM
        cfg["SPLIT_TAIL"] = bool(split_tail)
    return cfg | dict(num_warps=12)


def launch_config(variant: str, *, role: str, shape, dtype: str, platform) -> dict | None:
    """What ``variant`` launches with for a layer of ``shape`` (its head dim) and the compute
    dtype on a GPU (the plan prints it); None where the variant has no tile for it."""
    fp32, head_dim = dtype == "fp32", shape.head_dim
    if variant == "stream" and head_dim not in DECODE_STREAM_TILES:
        return None
    if variant in ("split", "split_write", "split_merge", "split_heads", "stream"):
        return decode_config(head_dim, fp32, interpret=False, variant=variant)
    if variant == "split_fixed":
        return decode_config(head_dim, fp32, interpret=False, variant=variant) | {"SPLIT_KEYS": split_keys(interpret=False)}
    if variant == "paged_fixed":      # its decode rows run split_fixed's configuration
        return extend_config(head_dim, fp32, interpret=False)
    if variant in ("paged", "paged_new_kv"):
        return extend_config(head_dim, fp32, interpret=False,
                             variant="v2" if variant == "paged_new_kv" else "v1")
    if variant == "tma":
        return {k: v for k, v in tma_config(head_dim, interpret=False).items() if k != "GLUON"}
    if variant == "gluon" and head_dim in GLUON_TILES:
        bn, ks, vs = GLUON_TILES[head_dim]
        return dict(BLOCK_M=128, BLOCK_N=bn, K_SLOTS=ks, V_SLOTS=vs, num_warps=12)
    if variant in GLUON_ROWS_VARIANTS:
        return gluon_rows_config(head_dim, persistent=variant != "gluon_rows",
                                 chain=variant == "gluon_rows_chain")
    if variant == "varlen_tile":
        return varlen_config(head_dim, fp32, interpret=False)
    if variant in ("varlen_gluon", "varlen_gluon_persistent", "varlen_gluon_split"):
        return varlen_gluon_config(head_dim, persistent=variant != "varlen_gluon",
                                   split_tail=variant == "varlen_gluon_split")
    return None
