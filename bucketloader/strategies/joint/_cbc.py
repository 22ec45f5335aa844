"""Linear programs for CBC (the solver bundled with PuLP), written as MPS from numpy arrays.

NOTE [ Why not PuLP's model objects here ]
The column-generation LP (NOTE [ The LP bound by columns ] in :mod:`._bound`) has tens of
thousands of rows; through PuLP's Python objects, building the model and writing its MPS file
took 3-7 s of a round whose solve took 1 s (measured on GSM8K). Here the same model goes from
coordinate arrays to an MPS file in one ``join``, CBC (PuLP's own binary,
``pulp.PULP_CBC_CMD().path``) solves it with the options PuLP passes, and the solution file
(values and row duals, PuLP's ``-printingOptions all`` format) is read back. Integer programs
still go through PuLP (:mod:`._ilp`).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import warnings

import numpy as np


def cbc_path() -> str:
    """The CBC binary bundled with PuLP."""
    import pulp

    with warnings.catch_warnings():  # PuLP 3.3 deprecates its bundled CBC for 4.0
        warnings.simplefilter("ignore", DeprecationWarning)
        return str(pulp.PULP_CBC_CMD(msg=False).path)


def solve_lp(
    cost: np.ndarray,
    rows: np.ndarray,
    cols: np.ndarray,
    vals: np.ndarray,
    sense: np.ndarray,
    rhs: np.ndarray,
    time_limit: float,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Minimise ``cost @ x`` over ``0 <= x <= 1`` subject to ``A x (sense) rhs``.

    ``A`` is given as coordinates (``rows``, ``cols``, ``vals``); ``sense`` holds ``"E"`` or
    ``"L"`` per row. Returns ``(x, duals)`` when CBC reports an optimal solution within
    ``time_limit`` seconds, else ``None``.
    """
    nrows, ncols = int(rhs.size), int(cost.size)
    if max(nrows, ncols) >= 10**7:  # fixed-format names hold 8 characters
        return None
    order = np.lexsort((rows, cols))
    rows, cols, vals = rows[order], cols[order], vals[order]
    # fixed-format MPS, as PuLP writes it: names of at most 8 characters in fixed fields
    lines = ["NAME          JOINT", "ROWS", " N  OBJ"]
    lines += [f" {s}  R{i}" for i, s in enumerate(sense.tolist())]
    lines.append("COLUMNS")
    starts = np.searchsorted(cols, np.arange(ncols + 1))
    rl, vl = rows.tolist(), vals.tolist()
    cl = cost.tolist()
    for j in range(ncols):
        name = f"C{j}"
        if cl[j] != 0:
            lines.append(f"    {name:<8}  {'OBJ':<8}  {cl[j]: .12e}")
        for a in range(int(starts[j]), int(starts[j + 1])):
            lines.append(f"    {name:<8}  {'R' + str(rl[a]):<8}  {vl[a]: .12e}")
    lines.append("RHS")
    lines += [
        f"    {'RHS':<8}  {'R' + str(i):<8}  {v: .12e}" for i, v in enumerate(rhs.tolist()) if v
    ]
    lines.append("BOUNDS")
    lines += [f" UP {'BND':<8}  {'C' + str(j):<8}  {1.0: .12e}" for j in range(ncols)]
    lines.append("ENDATA")
    with tempfile.TemporaryDirectory(prefix="bucketloader-joint-") as tmp:
        mps, sol = os.path.join(tmp, "model.mps"), os.path.join(tmp, "model.sol")
        with open(mps, "w") as f:
            f.write("\n".join(lines) + "\n")
        cmd = [cbc_path(), mps, "-sec", f"{max(time_limit, 0.01):.3f}", "-timeMode", "elapsed"]
        cmd += ["-solve", "-printingOptions", "all", "-solution", sol]
        try:
            subprocess.run(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=time_limit + 30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if not os.path.exists(sol):
            return None
        with open(sol) as f:
            head = f.readline()
            body = f.read().split("\n")
    if not head.startswith("Optimal"):
        return None
    x = np.zeros(ncols)
    duals = np.zeros(nrows)
    for line in body:
        parts = line.replace("**", "").split()
        if len(parts) < 4:
            continue
        name, value, dual = parts[1], float(parts[2]), float(parts[3])
        if name.startswith("R"):
            duals[int(name[1:])] = dual
        elif name.startswith("C"):
            x[int(name[1:])] = value
    return x, duals
