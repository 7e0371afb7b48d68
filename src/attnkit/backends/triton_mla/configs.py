"""Launch configurations of triton_mla's kernel variants, torch-free: the one owner of every tile.

The kernels' launchers (backend.py) and the planner (the declaration's ``launch_config`` hook,
which ``attnkit plan`` prints per role) both call these functions, with the same inputs: the
layer's shape (query heads a rank, latent width), the compute dtype, the new tokens a request
brings (decode: 1), and the device's geometry (the shared memory a block may opt into: the
device's own figure at run time, ``Platform.shared_memory_kb`` in a plan). No measured figure
goes in; the tiles are the shapes benchmarks/NOTES-mla.md records fitting each part with ptxas
(no spills, shared memory within the part's limit). What stays per step: the KV split count,
from the SM count and the step's lengths (decode.choose_splits), which a plan says it leaves
to run time.

Variant names here are the plan's (declaration.py): whole_rows, column_split, column_split_tma,
ws, mha_form.
"""
from __future__ import annotations

# The ws kernel (decode_gluon.py: a loader warp + two warpgroups): 64 heads a program, BLOCK_N
# keys a tile in a ring of NUM_STAGES (latent + rope rows, 1,152 B a key); AHEAD: the scores
# warpgroup issues Q.K of the next tile before its softmax (needs >= 3 stages: it holds one
# tile more); OUT16: a one-split launch stores the 16-bit output itself (no fp32 buffer and
# cast kernel). Shared memory: Q 72 KB + NUM_STAGES x BLOCK_N x 1,152 B + P (64 x BLOCK_N x 2 B).
WS = dict(BLOCK_H=64, BLOCK_N=64, NUM_STAGES=2, AHEAD=False, OUT16=False, num_warps=12)
WS_KNOBS = ("BLOCK_N", "NUM_STAGES", "AHEAD", "OUT16")      # what a ws_config may override
WS_SMEM_BYTES = 232_448                                     # sm_90's opt-in shared memory a block


def ws_smem_bytes(block_n: int, num_stages: int) -> int:
    """Shared memory of the ws kernel's buffers (Q, the ring, P), bytes; the barriers aside."""
    return 64 * 576 * 2 + num_stages * block_n * 576 * 2 + 64 * block_n * 2


def ws_tile(overrides: dict | None = None) -> dict:
    """WS with a caller's overrides (TritonMLABackend's ws_config: tests and benchmarks),
    refused (AK407) where the kernel cannot run them: a key that is not a knob, tiles that are
    not powers of two from 16 to 64 keys, AHEAD with fewer than 3 stages (it would wait for a
    tile that only the slot it holds can take), buffers past the shared memory of a block."""
    from attnkit.errors import fail
    if overrides is not None and not isinstance(overrides, dict):
        fail("AK407", f"triton_mla: ws_config must be a dict of {', '.join(WS_KNOBS)}, got "
                      f"{type(overrides).__name__}", field="ws_config", expected="dict",
             actual=repr(overrides)[:80])
    tile = dict(WS)
    for key, value in (overrides or {}).items():
        if key not in WS_KNOBS:
            fail("AK407", f"triton_mla: ws_config key {key!r} is not one of {', '.join(WS_KNOBS)}",
                 field="ws_config", expected=list(WS_KNOBS), actual=key)
        tile[key] = value
    n, stages = tile["BLOCK_N"], tile["NUM_STAGES"]
    ok = (isinstance(n, int) and n in (16, 32, 64) and isinstance(stages, int)
          and not isinstance(stages, bool) and stages >= 2
          and all(isinstance(tile[k], bool) for k in ("AHEAD", "OUT16"))
          and (stages >= 3 or not tile["AHEAD"]) and ws_smem_bytes(n, stages) <= WS_SMEM_BYTES - 1024)
    if not ok:
        fail("AK407", f"triton_mla: ws_config {overrides!r} gives a tile the ws kernel cannot run "
                      f"(BLOCK_N 16 / 32 / 64, NUM_STAGES >= 2 and >= 3 with AHEAD, AHEAD / OUT16 "
                      f"bools, Q + ring + P within {WS_SMEM_BYTES - 1024} B of shared memory)",
             field="ws_config", expected="a tile that fits", actual=repr(overrides)[:120])
    return tile

# Version 1's tile for >= 64-row programs on parts with >= 200 KB of shared memory a block
# (sm_90): 64 keys, 8 warps, 3 stages; ptxas for sm_90: 254 registers, no spills, 221696 B of
# shared memory (benchmarks/NOTES-mla.md, version 4). Does not fit sm_80's 163 KB.
V1_WIDE_TILE_SM90 = dict(block_n=64, num_warps=8, num_stages=3, programs_per_sm=1)

ABSORBED = ("whole_rows", "column_split", "column_split_tma", "ws")

# column_split's fused split merge (NOTES-mla.md, version 9): with 2 up to this many KV splits
# the split kernel merges them itself (the last program of a (work tile, head block) does; no
# reduce launch); more splits, or 0, go to the reduce kernel. A bound, because one program
# merges a tile's splits (S x [heads, L] fp32) where the reduce spreads them over (token,
# head, column block): at B 1 the splits are hundreds. 0 (off) until a GPU round measures it.
V2_MERGE_SPLITS = 0
SPLITS_AT_RUN_TIME = "from-SM-count"   # how a plan names the split count


def next_pow2(n: int) -> int:
    return 1 << (max(1, n) - 1).bit_length()


def absorbed_config(block_m: int, latent_width: int, *, fp32: bool = False,
                    smem_kb: int = 227) -> dict:
    """Version 1 tile for a ``block_m``-row program, for a GPU with ``smem_kb`` KB of shared
    memory per block (checked with ptxas for sm_90, sm_80 and sm_89 for spills and shared
    memory). ``programs_per_sm``: how many fit in shared memory together. fp32 (correctness,
    not speed: IEEE dots) keeps 16-row programs and 16-key tiles."""
    if latent_width < 256 or fp32:              # toy sizes (interpreter tests) or fp32
        return dict(block_n=16, num_warps=4, num_stages=2, programs_per_sm=2)
    if smem_kb < 160:                           # sm_86 / sm_89 / sm_120: ~99 KB per block
        if block_m >= 64:
            return dict(block_n=16, num_warps=8, num_stages=2, programs_per_sm=1)
        if block_m >= 32:
            return dict(block_n=32, num_warps=4, num_stages=2, programs_per_sm=1)
        return dict(block_n=64, num_warps=4, num_stages=3, programs_per_sm=1)
    if block_m >= 64 and smem_kb >= 200:        # sm_90: V1_WIDE_TILE_SM90
        return dict(V1_WIDE_TILE_SM90)
    if block_m >= 64:                           # [64, 512] fp32 accumulator: two warpgroups
        return dict(block_n=32, num_warps=8, num_stages=3, programs_per_sm=1)
    if block_m >= 32:
        return dict(block_n=64, num_warps=8, num_stages=2, programs_per_sm=1)
    # ~93 KB a program: two share an SM on sm_90 (227 KB), one on sm_80 (163 KB)
    return dict(block_n=64, num_warps=4, num_stages=3, programs_per_sm=2 if smem_kb >= 200 else 1)


def v2_block_h(heads: int, latent_width: int, *, fp32: bool = False,
               smem_kb: int = 227) -> int | None:
    """Heads per program for column_split where it differs from version 1: a 128-head rank
    takes all its heads in one program (two warpgroups of 64 rows, so every latent tile is read
    into shared memory once for all 128 heads); None elsewhere."""
    if heads >= 128 and latent_width >= 256 and not fp32 and smem_kb >= 200:
        return 128
    return None


def absorbed_config_v2(block_m: int, latent_width: int, *, fp32: bool = False,
                       smem_kb: int = 227) -> dict | None:
    """column_split tile for a ``block_m``-row program, or None where version 1's tile (with
    ``v_split`` = 1) is used. Checked with ptxas for sm_90 (benchmarks/NOTES-mla.md)."""
    if latent_width < 256 or fp32 or smem_kb < 200:
        return None
    if block_m >= 128:
        # Triton splits the 128 rows between two warpgroups (warpsPerCTA [8, 1]): each runs
        # Q.K as 64 x 32 wgmma and owns a [64, 256] accumulator; 211 registers, 0 spills,
        # 221 KB shared memory (ptxas sm_90)
        return dict(block_n=32, num_warps=8, num_stages=3, programs_per_sm=1, v_split=2)
    if block_m >= 64:
        # one warpgroup, [64, 256] accumulator: 0 spills, 147 KB shared memory (ptxas sm_90);
        # 64-key tiles spilled 25-32 registers at 4 warps
        return dict(block_n=32, num_warps=4, num_stages=3, programs_per_sm=1, v_split=2)
    if block_m <= 16:
        # a decode token of <= 16 heads: 32-key tiles, 6 stages, the whole latent row
        # (v_split 1); ptxas sm_90 (Triton 3.6): 192 registers, 0 spills, 93,192 B of shared
        # memory, so two programs share an SM (NOTES-mla.md, versions 6 and 8)
        return dict(block_n=32, num_warps=4, num_stages=6, programs_per_sm=2, v_split=1)
    return None


def absorbed_tiles(variant: str, *, heads: int, latent_width: int, new_tokens: int, fp32: bool,
                   smem_kb: int, block_h: int | None = None) -> dict:
    """The tile an absorbed variant launches with -> {block_h, block_t, block_n, num_warps,
    num_stages, v_split, programs_per_sm; column_split also merge_splits}. A program holds
    ``block_t`` tokens of one request x ``block_h`` heads (64 rows, 16 in fp32: fp32 tiles are
    twice the bytes); ``new_tokens``: the most a request of the step brings (decode 1).
    ``block_h``: a caller's override. The ws kernel's own shape is ``WS``; the tile here is
    what its launcher is handed."""
    rows = 16 if fp32 else 64
    columns = variant in ("column_split", "column_split_tma")
    wide = v2_block_h(heads, latent_width, fp32=fp32, smem_kb=smem_kb) if columns else None
    block_h = block_h or wide or min(rows, max(16, next_pow2(heads)))
    block_t = max(1, min(next_pow2(new_tokens), rows // block_h))
    args = (block_h * block_t, latent_width)
    kw = dict(fp32=fp32, smem_kb=smem_kb)
    cfg = (absorbed_config_v2(*args, **kw) if columns else None) or dict(absorbed_config(*args, **kw), v_split=1)
    if variant == "column_split_tma":
        cfg["num_stages"] = min(cfg["num_stages"], 2)        # 3 stages spill (ptxas sm_90)
    if variant == "column_split":
        cfg["merge_splits"] = V2_MERGE_SPLITS
    return dict(block_h=block_h, block_t=block_t, **cfg)


def merge_tile(block_m: int, latent_width: int, num_warps: int) -> tuple[int, int]:
    """(BLOCK_C, CHUNK_S) of column_split's in-kernel merge for a ``block_m``-row program:
    columns and splits a load round, [block_m, BLOCK_C] x CHUNK_S within 64 fp32 values a
    thread (the 128-head tile merges 128 columns at a time; registers and spills with ptxas:
    NOTES-mla.md version 9)."""
    budget = 2048 * num_warps
    block_c = min(latent_width, 128, max(16, budget // block_m))
    return block_c, max(1, min(4, budget // (block_m * block_c)))


def reduce_tile(rows: int, latent_width: int, num_splits: int) -> tuple[int, int]:
    """(BLOCK_S, BLOCK_L) of the split reduce over ``rows`` (token, head) pairs: up to 32
    splits a round in a tile of <= 4096 fp32 (32 a thread at 4 warps), at most 256 columns,
    and narrower columns until the step has >= 256 programs, so a one-request step of
    hundreds of splits is not a few long chains (NOTES-mla.md version 10)."""
    block_s = min(32, next_pow2(num_splits))
    block_l = min(latent_width, 256, 4096 // block_s)
    while rows * (latent_width // block_l) < 256 and block_l > 32:
        block_l //= 2
    return block_s, block_l


def mha_form_tiles(*, fp32: bool, smem_kb: int, interpret: bool = False) -> dict:
    """The MHA-form flash kernel's tile: no spills and pipelined loads with ptxas for sm_90
    (144 KB of shared memory); 32-key tiles (68 KB) where blocks get ~99 KB; small fp32 tiles
    ("ieee" dots); the interpreter's smallest."""
    if interpret:
        return dict(block_m=16, block_n=16, num_warps=4, num_stages=1)
    if fp32:
        return dict(block_m=32, block_n=32, num_warps=4, num_stages=2)
    return dict(block_m=64, block_n=64 if smem_kb >= 160 else 32, num_warps=4, num_stages=3)


def launch_config(variant: str, *, role: str, shape, dtype: str, platform) -> dict | None:
    """What ``variant`` launches with for a layer of ``shape`` (planning.profile.Shape: heads a
    rank, kv_lora_rank) in ``role`` on ``platform``; None where the platform does not say its
    shared memory. Tiles in upper case as the kernels name them; ``num_splits`` is left to run
    time (SPLITS_AT_RUN_TIME)."""
    smem_kb = getattr(platform, "shared_memory_kb", None)
    if smem_kb is None or shape.kv_lora_rank is None:
        return None
    fp32 = dtype == "fp32"
    if variant == "mha_form":
        tiles = mha_form_tiles(fp32=fp32, smem_kb=smem_kb)
    elif variant == "ws":
        tiles = {k.lower(): v for k, v in WS.items() if v is not False}   # switches: on where named
        tiles["num_splits"] = SPLITS_AT_RUN_TIME
    elif variant in ABSORBED:
        # decode brings one token a request; a prefill / extend request the most a program holds
        tiles = absorbed_tiles(variant, heads=shape.heads, latent_width=shape.kv_lora_rank,
                               new_tokens=1 if role == "decode" else 1 << 30, fp32=fp32,
                               smem_kb=smem_kb)
        tiles.pop("programs_per_sm")
        tiles["num_splits"] = SPLITS_AT_RUN_TIME
    else:
        return None
    return {k if k.startswith("num_") else k.upper(): v for k, v in tiles.items()}
