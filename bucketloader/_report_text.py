"""The text form of a :class:`~bucketloader.report.DynamicityReport`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from bucketloader.report import DynamicityReport


def pct(x: float) -> str:
    """A padding ratio as a percentage with sensible precision."""
    if x == 0:
        return "0%"
    return f"{100 * x:.2f}%" if x < 0.1 else f"{100 * x:.1f}%"


def summary(r: DynamicityReport) -> str:
    out = [f"bucketloader dynamicity report: {r.source}"]
    h = r.histogram
    if h is not None:
        out.append(
            f"  samples {h.num_samples:,} | distinct lengths {h.num_values:,} | min {h.min:,} | "
            f"median {int(h.quantile(0.5)):,} | max {h.max:,} | mean {h.total / h.num_samples:,.1f}"
        )
        out.append(
            f"  unbucketed: {h.num_values:,} distinct lengths, so up to {h.num_values:,} distinct "
            "shapes (each recompiles under torch.compile / XLA)"
        )
    if r.dynamic is not None:
        d = r.dynamic
        out.append(
            f"  dynamic padding (random batches of {d['batch_size']}, each padded to its longest): "
            f"{pct(d['padding_ratio'])} padding, {d['num_shapes']:,} distinct batch shapes"
        )
    if r.rows:
        ks = sorted({row.num_buckets for row in r.rows})
        names = list(dict.fromkeys(row.strategy for row in r.rows))
        out.append("")
        out.append("  padding ratio (shapes used) by strategy and shape budget k")
        width = max(len(n) for n in names) + 2
        out.append("  " + "strategy".ljust(width) + "".join(f"k={k}".rjust(16) for k in ks))
        for name in names:
            cells = []
            for k in ks:
                row = r.row(name, k)
                mark = "*" if row is r.recommended else " "
                cells.append(f"{pct(row.padding_ratio)} ({row.num_shapes}){mark}".rjust(16))
            out.append("  " + name.ljust(width) + "".join(cells))
        best = r.recommended
        if best is not None:
            out.append("")
            out.append(
                f"  recommended (*): strategy={best.strategy!r}, k={best.num_buckets}: "
                f"{pct(best.padding_ratio)} padding, {best.num_shapes} shapes"
            )
            out.append(f"    boundaries: {list(best.boundaries)}")
            out.append(f"    rule: {r.rule}")
    if r.num_batches:
        out.append("")
        out.append(f"  DataLoader: {r.num_batches:,} batches scanned")
        for name, counts in r.batch_shapes.items():
            common = ", ".join(f"{tuple(s)} x{c}" for s, c in counts.most_common(3))
            more = f", ... ({len(counts) - 3} more)" if len(counts) > 3 else ""
            out.append(f"    {name}: {len(counts):,} distinct shapes; {common}{more}")
    return "\n".join(out)
