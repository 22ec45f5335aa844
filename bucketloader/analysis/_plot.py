"""The report's picture (matplotlib, Agg backend, imported only here)."""

from __future__ import annotations

import errno
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bucketloader._files import NotAFile, os_reason, write_output

if TYPE_CHECKING:  # pragma: no cover
    from bucketloader.analysis.report import DynamicityReport

_COLORS = {
    "optimal": "#d62728",
    "lp": "#8c1c13",
    "percentile": "#1f77b4",
    "equal_mass": "#2ca02c",
    "linear": "#9467bd",
    "geometric": "#ff7f0e",
    "pad_to_max": "#7f7f7f",
}


def pct(x: float) -> str:
    """A padding ratio as a percentage with sensible precision (report text and plot labels)."""
    if x == 0:
        return "0%"
    return f"{100 * x:.2f}%" if x < 0.1 else f"{100 * x:.1f}%"


def plot_report(r: DynamicityReport, path: Path, *, dpi: int) -> Path:
    """Draw the histogram + boundaries, the padding-vs-k frontier and the loader's shapes."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(
            "report.plot() needs matplotlib: pip install 'bucketloader[plot]'"
        ) from None
    panels = (["hist", "frontier"] if r.histogram is not None else []) + (
        ["shapes"] if r.batch_shapes else []
    )
    if not panels:
        raise ValueError("nothing to plot: the report has neither lengths nor batch shapes")
    widths = {"hist": 1.45, "frontier": 1.0, "shapes": 0.9}
    with plt.rc_context({"font.size": 9.5, "axes.spines.top": False, "axes.spines.right": False}):
        fig, axes = plt.subplots(
            1,
            len(panels),
            figsize=(sum(5.4 * widths[p] for p in panels), 4.9),
            gridspec_kw={"width_ratios": [widths[p] for p in panels]},
            squeeze=False,
        )
        for ax, panel in zip(axes[0], panels, strict=True):
            {"hist": _histogram, "frontier": _frontier, "shapes": _shapes}[panel](ax, r)
        fig.suptitle(f"bucketloader dynamicity report: {r.source}", fontsize=12, x=0.01, ha="left")
        fig.tight_layout()
        image = io.BytesIO()  # drawn whole first: NOTE [ An image written all or nothing ]
        try:
            fig.savefig(image, dpi=dpi, format=path.suffix[1:].lower())
        finally:
            plt.close(fig)
    try:
        write_output(path, image.getvalue())  # (NOTE [ Replacing a user's output ])
    except NotAFile as exc:
        raise ValueError(f"cannot write the plot to {path}: it is {exc}; name a file") from None
    except OSError as exc:  # (its own text names the temporary file, not the plot)
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise OSError(
            exc.errno,
            f"cannot write the plot to {path} ({os_reason(exc)}); any file there is left as it "
            f"was: {'free some space, or ' if full else ''}name a file where you can write",
        ) from None
    return path


# NOTE [ An image written all or nothing ]
# ``savefig(path)`` truncated the file before drawing into it: on a full disk a rerun left the
# previous report's image empty (and a new path an empty file), with an error naming no file.
# The image is drawn into memory (a few hundred KB at the default dpi) and replaces the file in
# one ``os.replace``, as the cache writes its entries.


# NOTE [ Whole lengths per bar ]
# Lengths are integers, so a bar must hold a whole number of them, the same number in every bar:
# bins of a fractional width (the range cut into up to 120 equal parts) held one length in some
# bars and two in the next, and Europarl's 91 token counts over 0..121 (bins 1.34 wide) were
# drawn as a sawtooth of ~900 and ~1,800 samples that is not in the data (s34-user). Each bar
# holds ``width`` consecutive lengths (the fewest that keep 120 bars or fewer) and is drawn over
# ``(first - 1, last]``: a length ``L`` covers ``(L - 1, L]``, as a bucket ``b[i-1] < L <= b[i]``
# does, so a boundary line at ``b`` is the right edge of the bar that ends with ``b``.


def _length_bars(values: Any, counts: Any, most: int = 120) -> tuple[Any, Any, int]:
    """Bars of a length histogram (its distinct ``values`` and their ``counts``): the bars' left
    edges, their heights and their common width, each bar holding ``width`` whole lengths
    (NOTE [ Whole lengths per bar ]).

    Example:
        >>> left, heights, width = _length_bars(np.array([1, 2, 3, 6]), np.array([5, 1, 2, 4]), 3)
        >>> left.tolist(), heights.tolist(), width
        ([0, 2, 4], [6.0, 2.0, 4.0], 2)
    """
    lo, hi = int(values[0]), int(values[-1])
    width = max(1, -(-(hi - lo + 1) // most))
    heights = np.bincount((np.asarray(values) - lo) // width, weights=counts)
    return lo - 1 + width * np.arange(heights.size), heights, width


def _histogram(ax: Any, r: DynamicityReport) -> None:
    h = r.histogram
    if h is None:  # plot() refuses reports without lengths before drawing
        raise ValueError("this report has no lengths to plot")
    best = r.recommended
    hi = h.max
    left, counts, width = _length_bars(h.values, h.counts)
    ax.bar(left, counts, width=width, align="edge", color="#9bb7d4", lw=0)
    start = min(0, int(left[0]))
    ax.set_xlim(start, hi * 1.02 + 1)
    # headroom: the top ticks take the top 7%, the legend sits below them, the bars below it
    top = counts.max() * 1.5
    ax.set_ylim(0, top)
    if best is not None:
        b = np.asarray(best.boundaries)
        starts = np.concatenate([[start], b[:-1]])
        for i, (s, e) in enumerate(zip(starts, b, strict=True)):
            if i % 2 == 0:
                ax.axvspan(s, e, color="#f3d9d9", alpha=0.45, lw=0, zorder=0)
        ax.vlines(b, 0, counts.max() * 1.08, color=_COLORS["optimal"], lw=1.1, zorder=3)
        label = f"{best.strategy}, k={best.num_buckets}: {pct(best.padding_ratio)} padding"
        ax.plot([], [], color=_COLORS["optimal"], lw=1.5, label=label)
        other = _row_or_none(r, "percentile", best.num_buckets)
        if other is not None and best.strategy != "percentile":
            ax.vlines(
                other.boundaries, top * 0.93, top, color=_COLORS["percentile"], lw=1.6, zorder=3
            )
            ax.plot(
                [],
                [],
                color=_COLORS["percentile"],
                lw=1.6,
                label=f"percentile, k={other.num_buckets}: {pct(other.padding_ratio)} (top ticks)",
            )
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(0, 0.92),  # under the top ticks' band, over the bars
            fontsize=8.5,
            framealpha=0.92,
            edgecolor="none",
        )
    ax.set_title(
        f"{h.num_samples:,} lengths, {h.num_values:,} distinct "
        f"(median {int(h.quantile(0.5)):,}); bucket boundaries",
        fontsize=10,
        loc="left",
    )
    ax.xaxis.set_major_formatter(_count_formatter())
    ax.set_xlabel("length (each bucket pads up to its right edge)")
    ax.set_ylabel("samples")


def _frontier(ax: Any, r: DynamicityReport) -> None:
    ks = sorted({row.num_buckets for row in r.rows})
    names = list(dict.fromkeys(row.strategy for row in r.rows))
    # log scale needs a positive padding somewhere; data with no padding at any k (a single
    # distinct length, pre-packed blocks) is drawn on a linear scale at 0%
    log = any(row.padding_ratio > 0 for row in r.rows)
    on_axis = ax.get_xaxis_transform()  # (x: k; y: 0 is the bottom of the axes)
    zeros = False
    for name in names:
        ys = np.array([r.row(name, k).padding_ratio for k in ks]) * 100
        strong = name in ("optimal", "lp")
        if log and (ys <= 0).any():
            # NOTE [ No padding on a log scale ]: log(0) has no place on the axis, so a k without
            # padding was a gap: on 3 lengths every optimal point and the recommendation's star
            # were missing (s30-first). Such points sit on the x axis, said in its label.
            zero = ys <= 0
            ys[zero] = np.nan
            zeros = True
            ax.scatter(
                np.asarray(ks)[zero],
                np.zeros(int(zero.sum())),
                s=30 if strong else 18,
                color=_COLORS.get(name),
                transform=on_axis,
                clip_on=False,
                zorder=5 if strong else 4,
            )
        ax.plot(
            ks,
            ys,
            marker="o",
            ms=4.5 if strong else 3.5,
            lw=2.4 if strong else 1.3,
            color=_COLORS.get(name),
            label=name,
            zorder=4 if strong else 3,
        )
    if r.padding_target > 0 or not log:
        ax.axhline(r.padding_target * 100, color="#444444", ls="--", lw=0.9)
        ax.annotate(
            f"target {pct(r.padding_target)}",
            (ks[0], r.padding_target * 100),
            textcoords="offset points",
            xytext=(3, 3),  # above the line: under it the x axis clips it on a log scale
            fontsize=8,
            color="#444444",
        )
    if r.dynamic is not None and r.dynamic["padding_ratio"] > 0:
        d = r.dynamic
        y = d["padding_ratio"] * 100
        ax.axhline(y, color="black", ls=":", lw=1.2)
        ax.annotate(
            f"dynamic padding, batch {d['batch_size']}: {pct(d['padding_ratio'])}, "
            f"{d['num_shapes']:,} shapes",
            (ks[-1], y),
            textcoords="offset points",
            xytext=(0, -11),
            ha="right",
            fontsize=8,
        )
    best = r.recommended
    if best is not None:
        ax.scatter(
            [best.num_buckets],
            [best.padding_ratio * 100 if best.padding_ratio > 0 else 0.0],
            s=200,
            marker="*",
            color="gold",
            edgecolor="black",
            zorder=6,
            label=f"recommended: k={best.num_buckets}",
            **({"transform": on_axis, "clip_on": False} if log and best.padding_ratio <= 0 else {}),
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    if log:
        from matplotlib.ticker import LogLocator, NullFormatter

        ax.set_yscale("log")
        low, high = ax.get_ylim()
        # 1-2-5 ticks over a few decades; over more, decades only: matplotlib's LogLocator with
        # subs draws no tick at all once it would skip decades (ratios of 1e-9 to 100%: an axis
        # without a label), and 1-2-5 over six decades crowded 21 labels
        subs = (1.0, 2.0, 5.0) if np.log10(high / low) <= 3 else (1.0,)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        top = max(r.padding_target * 100, 1.0)
        ax.set_ylim(-0.05 * top, 1.3 * top)
    ax.yaxis.set_major_formatter(_percent_formatter())
    ax.grid(True, which="major", alpha=0.3)
    ax.set_xlabel(
        "shape budget k (number of buckets = distinct padded lengths)"
        + ("\npoints on this axis: no padding (0%)" if zeros else "")
    )
    ax.set_ylabel("padding (pad elements / real elements)")
    title = "padding vs. shape budget, per strategy" + ("" if log else ": none at any k")
    ax.set_title(title, fontsize=10, loc="left")
    # below the axes: inside, it would hide lines or the target's label whatever the data
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.22 if zeros else -0.16),  # (under a second line of the label)
        fontsize=8,
        ncol=4,
        frameon=False,
        columnspacing=1.2,
        handlelength=1.6,
    )


def _shapes(ax: Any, r: DynamicityReport) -> None:
    names = list(r.batch_shapes)[:12]
    distinct = [len(r.batch_shapes[n]) for n in names]
    y = np.arange(len(names))
    ax.barh(y, distinct, height=0.5, color="#8fbc8f")
    for yi, n, c in zip(y, names, distinct, strict=True):
        top_shape, top_count = r.batch_shapes[n].most_common(1)[0]
        ax.annotate(
            f"{c:,}  (most common {top_shape} x{top_count})",
            (c, yi),
            textcoords="offset points",
            xytext=(3, -3),
            fontsize=8,
        )
    ax.set_yticks(y)
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xlim(0, max(distinct) * 1.9 + 1)
    ax.set_xlabel("distinct batch shapes")
    ax.set_title(f"DataLoader: {r.num_batches:,} batches scanned", fontsize=10, loc="left")


def _row_or_none(r: DynamicityReport, strategy: str, k: int) -> Any:
    try:
        return r.row(strategy, k)
    except KeyError:
        return None


def _count_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    def fmt(v: float, _: Any) -> str:
        if abs(v) >= 1e6:
            return f"{v / 1e6:g}M"
        return f"{v / 1e3:g}k" if abs(v) >= 1e4 else f"{v:g}"

    return FuncFormatter(fmt)


def _percent_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:g}%")
