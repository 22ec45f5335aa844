"""Fixed-shape random selection for :mod:`bucketloader.static`: a keyed permutation plus counting.

Everything here is static: shapes depend only on ``(B, N, k)``, there is no ``.item()``, no
``nonzero``, no boolean indexing and no Python branch on tensor data, so it traces into one graph
under ``torch.compile(fullgraph=True)`` and never synchronises a CUDA stream.

The permutation is a keyed Feistel network on the grid ``[0, a) x [0, b)`` (``b = 2**s``,
``a = ceil(N / b)``, so ``a * b - N < b <= 2 * sqrt(N)`` padding slots). Key derivation is int64
on values below ``2**32`` (products below ``2**63``) and the rounds are int32 on 16-bit values
(products below ``2**31``): nothing overflows, so eager, compiled and CUDA runs agree bit for bit.

NOTE [ Selection algorithm ]
Every selection is "the first ``q`` eligible elements of each class in a random order", which is a
uniformly random subset. The random order is a keyed pseudo-random permutation computed
elementwise (a 6- or 10-round Feistel network on a ``~sqrt(N) x ~sqrt(N)`` grid, int32 arithmetic
that never overflows), so no sort or ``topk`` is needed; an element's rank within its class in
that order is a ``cumsum``, and one ``scatter`` compacts the chosen elements into their slots. A
second, independent permutation of the ``K`` slots mixes the two classes (taking "the first" of
each interleaves them unevenly). Cost: O(N) integer work, two ``cumsum`` and two ``scatter``
passes, against two ``topk`` over N for the published fixed-shape version. Compiled, inductor
fuses the rounds into one loop; eager, each round is a per-row table of ~sqrt(N) values applied
with one ``gather`` (``feistel_tabulated``, the same permutation bit for bit). Figures:
``benchmarks/results/subsampler.md``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_M32 = 0xFFFFFFFF
_MUL = 0x045D9F3B  # < 2**27, so (value < 2**32) * _MUL < 2**59: exact in int64
_MUL16_A, _MUL16_B = 0x6D2B, 0x5A8B  # odd, < 2**15
_SALT_ROW, _SALT_HI = 0x5BD1E995, 0x27D4EB2F
_SALT_ORDER = 0x2545F4914F6CDD1D  # a second, independent stream for the output order
#: ``torch.compiler.is_compiling`` (torch >= 2.3), else ``torch._dynamo.is_compiling`` (2.1, 2.2):
#: True while Dynamo traces, so compiled graphs take the arithmetic paths; both are traced as
#: constants by identity, so the alias compiles like the original.
if hasattr(torch.compiler, "is_compiling"):
    is_compiling = torch.compiler.is_compiling
else:  # torch < 2.3
    from torch._dynamo import is_compiling


def _gather_takes_int32() -> bool:
    """Whether ``Tensor.gather`` accepts an int32 index (torch >= 2.2; 2.1 wants int64)."""
    try:
        torch.zeros(1).gather(0, torch.zeros(1, dtype=torch.int32))
    except RuntimeError:
        return False
    return True


#: ``False`` on torch 2.1: ``feistel_tabulated`` then widens its indices to int64 for ``gather``.
_GATHER_INT32 = _gather_takes_int32()
#: Rows up to this length are shuffled by sorting hashed keys (cheap at that size, and a Feistel
#: network on a tiny grid needs many rounds to mix); longer rows use the Feistel permutation.
_SORT_MAX = 64
#: Feistel rounds: (row length limit, rounds); smaller grids mix slower per round.
_ROUNDS = ((4096, 10),)
_ROUNDS_LARGE = 6
#: Compiled on a GPU, rows longer than this are prefix-summed in blocks of at most this many
#: (NOTE [ Blocked scans ]); blocks narrower than ``_MIN_BLOCK`` are not worth a level.
_SCAN_BLOCK = 1024
_MIN_BLOCK = 16
#: Private switch for the blocked scans: None = when compiling for a non-CPU device (the default),
#: True = always (tests compare it to the single scan on CPU), False = never.
_BLOCKED_SCANS: bool | None = None


def _mix(x: Tensor) -> Tensor:
    """A bijective 32-bit integer hash (Mueller's), on int64 values in ``[0, 2**32)``."""
    x = ((x >> 16) ^ x) * _MUL & _M32
    x = ((x >> 16) ^ x) * _MUL & _M32
    return (x >> 16) ^ x


def _round16(x: Tensor, key: Tensor) -> Tensor:
    """The keyed 16-bit round function: xor the key, multiply, twice (int32, products < 2**31).

    Only its high bits are well mixed (a product's low bits depend only on the factors' low bits),
    so both rounds of `feistel` take high bits (``s <= 16``). ``x`` is used once on purpose:
    inductor re-traces an unrealised expression at every use and the halves carry every earlier
    round, so each xorshift (``x ^ (x >> k)``, two uses) would double the traced tree.
    """
    x = (x ^ key) * _MUL16_A & 0xFFFF
    return (x ^ key) * _MUL16_B & 0xFFFF


def draw_seed(generator: torch.Generator | None, device: torch.device) -> Tensor:
    """One random int64 on ``device``: from ``generator`` if given, else the default stream."""
    low, high = -(2**63), 2**63 - 1
    if generator is None:
        return torch.randint(low, high, (), device=device)
    return torch.randint(low, high, (), generator=generator, device=device)


def _geometry(n: int) -> tuple[int, int, int]:
    """``(a, b, s)`` with ``b = 2**s`` close to ``sqrt(n)`` and ``a = ceil(n / b)``."""
    # b ~ sqrt(n) keeps the two halves balanced (better mixing); float log2 keeps dynamic shapes
    # symbolic under torch.compile(dynamic=True).
    # int() was meant to specialise n ("symbolic log2/pow index maths makes dynamic compiles
    # take minutes"); torch 2.13's dynamo keeps it symbolic, no guard on its value, and one
    # dynamic graph for N = 100, 200 and 1000 compiled in 17 s under inductor (s22-compile)
    n = int(n)
    s = math.floor(math.log2(n) * 0.5 + 0.5)
    b = 2**s
    return (n + b - 1) // b, b, s


def _round_keys(seed: Tensor, rows: int, rounds: int) -> Tensor:
    """``[rows, rounds]`` 32-bit keys (int64): ``mix(mix(c) ^ s)``, ``c = row * rounds + round``.

    ``s`` is a 32-bit digest of the 64-bit seed, and ``mix`` is a bijection, so for one seed all
    keys are distinct. Kept shallow on purpose: inductor re-traces an unrealised expression at
    each use, so every nested hash multiplies compile time (five nested ``_mix`` calls here cost
    8 s of compile on 2 cores).
    """
    s = _mix(seed & _M32) ^ _mix((seed >> 32) & _M32 ^ _SALT_HI)
    c = torch.arange(rows * rounds, device=seed.device).view(rows, rounds)
    return _mix(_mix(c ^ _SALT_ROW) ^ s)


def _rounds(n: int) -> int:
    for limit, r in _ROUNDS:  # (a loop: torch 2.4's Dynamo cannot trace next(it, default))
        if n <= limit:
            return r
    return _ROUNDS_LARGE


def feistel(j: Tensor, keys: Tensor, a: int, b: int, s: int) -> Tensor:
    """The keyed bijection of ``[0, a * b)``: positions of the int32 indices ``j`` (broadcast)."""
    left, right = j >> s, j & (b - 1)
    for r in range(keys.shape[1]):
        key = keys[:, r : r + 1]
        if r % 2 == 0:  # left += F(right) mod a, F reduced to [0, a) by multiply-shift
            left = left + (_round16(right, key) * a >> 16)
            left = torch.where(left >= a, left - a, left)
        else:  # right += F(left) mod b, b = 2**s: F's top s bits
            right = (right + (_round16(left, key) >> (16 - s))) & (b - 1)
    return (left << s) | right


def permuted_positions(seed: Tensor, rows: int, n: int) -> tuple[Tensor, Tensor]:
    """Positions ``q[rows, D]`` (int32) of ``j = 0..D-1`` in a keyed random order, and ``j[1, D]``.

    Row ``r`` of ``q`` is a permutation of ``[0, D)`` with ``D >= n``; slots ``j >= n`` are
    padding. Different rows (and seeds) get independent-looking permutations.
    """
    device = seed.device
    if n <= _SORT_MAX:  # rank of a keyed bijective hash of j: distinct keys, so no ties
        keys = _round_keys(seed, rows, 2)
        j = torch.arange(n, device=device, dtype=torch.int32).view(1, n)
        order = _mix(_mix(j.to(torch.int64) ^ keys[:, :1]) ^ keys[:, 1:]).argsort(dim=1)
        q = torch.empty(rows, n, dtype=torch.int32, device=device)
        return q.scatter_(1, order, j.expand(rows, n)), j
    a, b, s = _geometry(n)
    keys = (_round_keys(seed, rows, _rounds(n)) & 0xFFFF).to(torch.int32)  # 16-bit round keys
    j = torch.arange(a * b, device=device, dtype=torch.int32).view(1, a * b)
    if is_compiling():  # inductor fuses the arithmetic rounds into one loop
        return feistel(j, keys, a, b, s), j
    return feistel_tabulated(keys, a, b, s), j


def feistel_tabulated(keys: Tensor, a: int, b: int, s: int) -> Tensor:
    """``feistel(arange(a * b), keys, a, b, s)``, bit for bit, with far fewer passes over memory.

    Each round function reads one half only (``< a`` or ``< b`` values, about ``sqrt(D)``), so
    eager mode tabulates it per row and round (``[rows, a]`` or ``[rows, b]``) and applies it with
    one ``gather``, instead of ~10 elementwise passes over ``[rows, D]``. The first round needs no
    gather at all: there ``right`` is the grid column. Compiled, the arithmetic version is faster.
    """
    rows, rounds = keys.shape
    half_a = torch.arange(a, device=keys.device, dtype=torch.int32)
    half_b = torch.arange(b, device=keys.device, dtype=torch.int32)

    def table(r: int) -> Tensor:  # F of every half value, reduced as in `feistel`
        if r % 2 == 0:
            return _round16(half_b, keys[:, r : r + 1]) * a >> 16  # [rows, b], in [0, a)
        return _round16(half_a, keys[:, r : r + 1]) >> (16 - s)  # [rows, a], in [0, b)

    left = half_a.view(1, a, 1) + table(0).view(rows, 1, b)  # round 0 broadcasts on the grid
    left = torch.where(left >= a, left - a, left).view(rows, a * b)
    right = half_b.repeat(a).expand(rows, a * b).clone()
    for r in range(1, rounds):
        if r % 2 == 0:
            left += table(r).gather(1, right if _GATHER_INT32 else right.long())
            left -= (left >= a).to(torch.int32) * a
        else:
            right += table(r).gather(1, left if _GATHER_INT32 else left.long())
            right &= b - 1
    left <<= s
    left |= right
    return left


def quota_select(
    first: Tensor,
    second: Tensor | None,
    quota_first: Tensor,
    quota_second: Tensor | None,
    k: int,
    seed: Tensor,
) -> tuple[Tensor, Tensor]:
    """Choose ``quota_first`` elements of ``first`` and ``quota_second`` of ``second`` per row.

    Args:
        first: ``[B, N]`` bool, the first class.
        second: ``[B, N]`` bool disjoint from ``first``, or ``None`` for a single class.
        quota_first: ``[B, 1]`` integer counts, at most the class sizes.
        quota_second: like ``quota_first`` (``None`` with ``second``); the quotas sum to <= ``k``.
        k: the output width.
        seed: 0-d int64 tensor on the data device.

    Returns:
        ``indices[B, k]`` (int64, padding slots hold 0) and ``valid[B, k]`` (valid slots first):
        each class's chosen set is uniformly random and their order is uniformly random.
    """
    classes = [(first, quota_first)]
    if second is not None and quota_second is not None:
        classes.append((second, quota_second))
    indices, total = _first_in_order(classes, k, seed)
    valid = torch.arange(k, device=first.device) < total
    if second is None:
        return indices, valid
    # "The first q of each class in a random order" is a uniform subset per class, but the classes
    # interleave unevenly (the denser class's picks come earlier), so shuffle the valid slots with
    # an independent permutation: a single-class pass over the k slots, O(k).
    order, _ = _first_in_order([(valid, total)], k, seed ^ _SALT_ORDER)
    return torch.where(valid, indices.gather(1, order), 0), valid


def _first_in_order(
    classes: list[tuple[Tensor, Tensor]], k: int, seed: Tensor
) -> tuple[Tensor, Tensor]:
    """The first ``quota`` elements of each class (``[B, N]`` bool masks, disjoint, at most
    three, with their ``[B, 1]`` quotas) in the keyed order, and their count ``[B, 1]``."""
    first = classes[0][0]
    rows, n = first.shape
    q, j = permuted_positions(seed, rows, n)
    d = j.shape[1]
    code = first.to(torch.int32)
    for c, (mask, _) in enumerate(classes[1:], 2):
        code = code + c * mask.to(torch.int32)
    code = torch.nn.functional.pad(code, (0, d - n))  # padding slots: class 0, never chosen
    # Scatter "where each element goes" to get the sequence in permuted order: each slot is written
    # exactly once (q is a permutation), carrying the element index and its class in one int32
    # (so j < 2**29: subsample.MAX_CANDIDATES; padding slots past N may wrap, they are never read).
    seq = torch.empty(rows, d, dtype=torch.int32, device=first.device)
    seq = seq.scatter_(1, q.to(torch.int64), (j << 2) | code)
    cls = seq & 3
    take, slot, total = _class_slots(cls, 1, classes[0][1])
    for c, (_, quota) in enumerate(classes[1:], 2):
        chosen, placed, quota = _class_slots(cls, c, quota)
        take, slot, total = take | chosen, slot + placed, total + quota
    # Chosen elements land in slots 0..total-1 in keyed order; the rest go to a dump slot k.
    slot = torch.where(take, slot, k).to(torch.int64)
    out = torch.zeros(rows, k + 1, dtype=torch.int32, device=first.device)
    return out.scatter_(1, slot, seq >> 2)[:, :k].to(torch.int64), total


def _class_slots(cls: Tensor, c: int, quota: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """For class ``c`` of the permuted sequence: which elements are taken (the first ``quota``),
    their slot among the class's picks (``quota`` for the rest), and the quota as int32."""
    quota = quota.to(torch.int32)
    inside = (cls == c).to(torch.int32)
    before = _prefix_sum(inside) - inside
    return (inside == 1) & (before < quota), torch.minimum(before, quota), quota


def _prefix_sum(x: Tensor) -> Tensor:
    """The inclusive int32 ``cumsum`` of ``x[rows, D]`` along dim 1, in blocks where it matters.

    NOTE [ Blocked scans ]
    torch 2.11's inductor cannot generate a CUDA kernel that scans a long row (~10^4, a
    persistent reduction in its "no x dimension" mode) and also reads a per-row value, as
    ``_class_slots`` does when it fuses ``before < quota`` into the scan: ``InductorError:
    TypeError: list indices must be integers or slices, not NoneType`` in
    ``TritonSymbols.get_block_shape`` (torch 2.13 treats that index as a scalar). With one row
    (B = 1) the row index is the constant 0, so it compiled. Compiled for a non-CPU device, a
    row longer than ``_SCAN_BLOCK`` is therefore summed as ``[rows, D / w, w]`` blocks
    (``w`` = the largest power of two dividing ``D``, at most ``_SCAN_BLOCK``: the permutation
    grid's columns) plus the prefix sums of the block totals, recursively; a row with no such
    divisor of at least ``_MIN_BLOCK`` (the totals row once N passes ~10^6) is padded with zeros
    to whole blocks of ``_SCAN_BLOCK`` first: no scan over a row longer than ``_SCAN_BLOCK``, the
    same integers. Eager and CPU keep the single ``cumsum`` (one pass). Checked on an H100 up to
    N = 10^6 (benchmarks/results/subsampler_gpu.md), and the padded level at 8 x 1.2 x 10^6,
    8 x 4 x 10^6 and 8 x 10^7 (session 8: compiles, equal to eager).
    """
    rows, d = x.shape
    blocked = _BLOCKED_SCANS
    if blocked is None:
        blocked = is_compiling() and x.device.type != "cpu"
    if not blocked or d <= _SCAN_BLOCK:
        return torch.cumsum(x, 1, dtype=torch.int32)
    width = min(d & -d, _SCAN_BLOCK)
    if width < _MIN_BLOCK:  # no power-of-two block divides d: pad the row with zeros to whole
        width = _SCAN_BLOCK  # blocks (the totals row of N above ~10^6), then cut the pad off
        padded = torch.nn.functional.pad(x, (0, -d % width))
        return _prefix_sum(padded)[:, :d]
    inner = torch.cumsum(x.view(rows, d // width, width), 2, dtype=torch.int32)
    totals = inner[:, :, -1]
    offsets = _prefix_sum(totals) - totals
    return (inner + offsets.unsqueeze(2)).view(rows, d)
