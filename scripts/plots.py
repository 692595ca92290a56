#!/usr/bin/env python3
"""Draws the PNG plots of an `fp8sim report`.

fp8sim writes a small JSON file with the numbers to plot (report.json's `plot_data`: one
object per plot, each naming its output `file`, plus `recipe_colours`: recipe name -> colour)
and runs this script with the project's Python. The script knows nothing about how the numbers
were computed; it only draws them.

usage: plots.py PLOT_DATA.json OUT_DIR [--manifest MANIFEST.json] [--only NAME ...]

PLOT_DATA.json may also be a command's whole JSON document with a `plot_data` key
(`fp8sim accum --json`).

Exit status: 0 every plot drawn; 3 matplotlib (or numpy) cannot be imported (nothing drawn;
the reason is the last line on stderr); 4 some plots failed (the manifest says which and why);
2 bad usage or unreadable input. Progress goes to stdout as "plot I/N NAME" lines.
"""
import argparse
import json
import math
import os
import sys
import traceback

EXIT_NO_MATPLOTLIB = 3
EXIT_SOME_FAILED = 4

# Each recipe's colour, the same in every plot: the plot data's "recipe_colours" (fp8sim copies
# them from the recipe files, recipes/*.json), set by main(). A recipe without one takes the
# fallback palette by its position in the plot.
RECIPE_COLOURS = {}
FALLBACK_COLOURS = ["#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd", "#1f77b4", "#ff7f0e"]


def recipe_colour(name, i):
    return RECIPE_COLOURS.get(name, FALLBACK_COLOURS[i % len(FALLBACK_COLOURS)])


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def plot_histograms(plt, spec, path):
    """COAT Figure 3: |x/s| of the optimizer moments in log2 bins, before and after expansion."""
    moments = spec["moments"]
    edges = spec["bin_edges_log2"]
    ncols = min(2, len(moments))
    nrows = (len(moments) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, 4.2 * nrows), squeeze=False)
    for ax in axes.flat[len(moments):]:
        ax.set_visible(False)
    for ax, m in zip(axes.flat, moments):
        centres = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:])]
        width = edges[1] - edges[0]
        total_before = max(1, sum(m["before"]) + m.get("underflow_before", 0))
        total_after = max(1, sum(m["after"]) + m.get("underflow_after", 0))
        before = [100.0 * c / total_before for c in m["before"]]
        after = [100.0 * c / total_after for c in m["after"]]
        ax.bar(centres, before, width=width, color="#4c72b0", alpha=0.55, label="before expansion")
        ax.bar(centres, after, width=width, color="#dd8452", alpha=0.55, label="after expansion")
        # Reference lines, labelled along the line so they never collide with the legend.
        for x, label, style in ((math.log2(448.0), "E4M3 max 448", "--"), (-6, "E4M3 min normal 2^-6", ":")):
            ax.axvline(x, color="#444", lw=0.8, ls=style)
            ax.text(x - 0.15, 0.5, label, transform=ax.get_xaxis_transform(), rotation=90, fontsize=7,
                    ha="right", va="center", color="#444")
        ax.set_xlabel("log2 |x / s|   (s: the group's scale, so |x/s| <= 448)")
        ax.set_ylabel("% of elements")
        title = m["name"]
        if finite(m.get("k_median")):
            title += f"   (median k = {m['k_median']:.3g})"
        ax.set_title(title, fontsize=11 if len(title) < 60 else 8)
        ub, ua = m.get("underflow_before", 0), m.get("underflow_after", 0)
        ax.text(0.01, 0.97,
                f"below 2^{edges[0]:g} (flush to 0): {100.0 * ub / total_before:.2f}% -> {100.0 * ua / total_after:.2f}%",
                transform=ax.transAxes, fontsize=8, va="top")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.93))
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(spec.get("title", "|x/s| before and after dynamic range expansion"), fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_table1(plt, spec, path):
    """Table 1 (MSE of m/sqrt(v)) as two heatmaps: this run's and the paper's."""
    import numpy as np
    rows, cols = spec["rows"], spec["cols"]
    panels = [("this run" + (f" ({spec['ours_label']})" if spec.get("ours_label") else ""), spec["ours"])]
    if spec.get("paper"):
        panels.append(("COAT paper, Table 1", spec["paper"]))
    from matplotlib.colors import LogNorm
    fig, axes = plt.subplots(1, len(panels), figsize=(6.0 * len(panels), 4.8), squeeze=False)
    for ax, (title, matrix) in zip(axes[0], panels):
        data = np.array([[v if finite(v) else np.nan for v in row] for row in matrix], dtype=float)
        # The cells span orders of magnitude: a log colour scale keeps each one distinguishable
        # (a linear one paints everything but the worst column the same colour).
        positive = data[np.isfinite(data) & (data > 0)]
        log = positive.size > 0 and positive.max() > positive.min()
        norm = LogNorm(vmin=positive.min(), vmax=positive.max()) if log else None
        shown = np.where(data > 0, data, np.nan) if log else data
        im = ax.imshow(shown, cmap="viridis_r", aspect="auto", norm=norm)
        best = np.nanmin(data) if np.isfinite(data).any() else np.nan
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                v = data[i, j]
                text = "n/a" if not np.isfinite(v) else f"{v:.4g}"
                weight = "bold" if np.isfinite(v) and v == best else "normal"
                if log:
                    lo, hi = math.log(positive.min()), math.log(positive.max())
                    pos = (math.log(v) - lo) / (hi - lo) if np.isfinite(v) and v > 0 else 0.0
                else:
                    lo, hi = np.nanmin(data), np.nanmax(data)
                    pos = (v - lo) / (hi - lo) if np.isfinite(v) and hi > lo else 0.0
                dark = pos > 0.5
                ax.text(j, i, text, ha="center", va="center", fontsize=9, fontweight=weight,
                        color="white" if dark else "black")
        ax.set_xticks(range(len(cols)), labels=cols, rotation=20, fontsize=8)
        ax.set_yticks(range(len(rows)), labels=rows, fontsize=8)
        ax.set_xlabel("second moment v")
        ax.set_ylabel("first moment m")
        ax.set_title(title, fontsize=11)
        fig.colorbar(im, ax=ax, shrink=0.85, label="MSE (log scale)" if log else "MSE")
    fig.suptitle(spec.get("title", "MSE of m / sqrt(v), quantized vs fp32 states"), fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_gemm_error(plt, spec, path):
    """COAT Figure 4(a) style: forward GEMM output error per layer, one line per recipe."""
    layers = spec["layers"]
    fig, ax = plt.subplots(figsize=(9, 4.6))
    x = list(range(len(layers)))
    any_positive = False
    # Recipes with nearly the same error lie on top of each other: each gets its own line style and
    # marker (hollow, of decreasing size, so the ones below stay visible) besides its colour.
    styles = ["-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3))]
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    n = len(spec["recipes"])
    for i, (name, values) in enumerate(spec["recipes"].items()):
        ys = [v if finite(v) and v > 0 else float("nan") for v in values]
        any_positive = any_positive or any(finite(v) for v in ys)
        colour = recipe_colour(name, i)
        ax.plot(x, ys, ls=styles[i % len(styles)], marker=markers[i % len(markers)], ms=9 - 5 * i / max(1, n - 1),
                mfc="none", mec=colour, mew=1.3, lw=1.5, color=colour, label=name, zorder=2 + i)
    if any_positive:
        ax.set_yscale("log")
    step = max(1, len(layers) // 24)
    ax.set_xticks(x[::step], labels=[str(l) for l in layers][::step], rotation=45 if len(layers) > 8 else 0,
                  fontsize=8, ha="right" if len(layers) > 8 else "center")
    ax.set_xlabel(spec.get("xlabel", "layer"))
    ax.set_ylabel(spec.get("ylabel", "forward output error"))
    ax.set_title(spec.get("title", "Per-layer forward GEMM error"), fontsize=12)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_layer_gemm_heatmap(plt, spec, path):
    """Per-layer x GEMM forward output error, one panel per recipe, one shared log colour scale."""
    import numpy as np
    from matplotlib.colors import LogNorm
    layers, gemms, panels = spec["layers"], spec["gemms"], spec["recipes"]
    grids = {r: np.array([[v if finite(v) else np.nan for v in row] for row in g], dtype=float)
             for r, g in panels.items()}
    positive = np.concatenate([g[np.isfinite(g) & (g > 0)] for g in grids.values()])
    norm = LogNorm(vmin=positive.min(), vmax=positive.max()) if positive.size and positive.max() > positive.min() \
        else None
    n = len(grids)
    height = min(12.0, 1.2 + 0.28 * len(layers))
    fig, axes = plt.subplots(1, n, figsize=(1.2 + 2.6 * n, height), squeeze=False, sharey=True,
                             layout="constrained")
    im = None
    for ax, (name, g) in zip(axes[0], grids.items()):
        im = ax.imshow(np.where(g > 0, g, np.nan), cmap="magma_r", aspect="auto", norm=norm,
                       interpolation="nearest")
        ax.set_xticks(range(len(gemms)), labels=gemms, rotation=60, fontsize=7, ha="right")
        step = max(1, len(layers) // 32)
        ax.set_yticks(range(0, len(layers), step), labels=[str(l) for l in layers][::step], fontsize=7)
        ax.set_title(name, fontsize=10)
    axes[0][0].set_ylabel("layer")
    if im is not None:
        fig.colorbar(im, ax=list(axes[0]), shrink=0.9, label="||Y_q - Y|| / ||Y||" + (" (log)" if norm else ""))
    fig.suptitle(spec.get("title", "Forward GEMM output error per layer and GEMM"), fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_memory(plt, spec, path):
    """Stacked per-GPU memory bars per recipe, with the GPU's capacity as a line."""
    components = spec["components"]
    recipes = list(spec["recipes"].keys())
    colours = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
               "#ccb974", "#64b5cd"]
    fig, ax = plt.subplots(figsize=(max(6, 1.5 * len(recipes) + 3), 4.8))
    bottoms = [0.0] * len(recipes)
    for ci, comp in enumerate(components):
        vals = [spec["recipes"][r][ci] if finite(spec["recipes"][r][ci]) else 0.0 for r in recipes]
        ax.bar(recipes, vals, bottom=bottoms, color=colours[ci % len(colours)], label=comp, width=0.6)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    for i, total in enumerate(bottoms):
        peak = spec.get("peak", {}).get(recipes[i])
        label = f"{peak:.1f}" if finite(peak) else f"{total:.1f}"
        ax.text(i, total, label, ha="center", va="bottom", fontsize=8)
    if finite(spec.get("capacity_gib")):
        ax.axhline(spec["capacity_gib"], color="#c00", lw=1, ls="--")
        ax.text(-0.4, spec["capacity_gib"], f"GPU capacity {spec['capacity_gib']:.1f} GiB",
                color="#c00", fontsize=8, va="bottom", ha="left")
        ax.set_ylim(top=max(ax.get_ylim()[1], spec["capacity_gib"] * 1.08))
    ax.set_ylabel(spec.get("unit", "GiB") + " per GPU")
    ax.set_title(spec.get("title", "Memory per GPU"), fontsize=12)
    ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_speed(plt, spec, path):
    """The total step per recipe (top), then time per op, grouped bars per recipe (ops top to bottom;
    the smaller ops come summed by kind)."""
    ops = spec["ops"]
    recipes = list(spec["recipes"].keys())
    totals = spec.get("totals") or {}
    n = len(recipes)
    height = 0.8 / max(1, n)
    ops_h = max(3.5, 0.28 * len(ops) * max(1, n) ** 0.5 + 1.5)
    top_h = 0.45 * n + 0.9 if totals else 0.0
    if totals:
        fig, (ax_t, ax) = plt.subplots(2, 1, figsize=(9, ops_h + top_h),
                                       gridspec_kw={"height_ratios": [top_h, ops_h]})
        vals = [totals.get(r) if finite(totals.get(r)) else 0.0 for r in recipes]
        ax_t.barh(range(n), vals, height=0.6, color=[recipe_colour(r, i) for i, r in enumerate(recipes)])
        for i, v in enumerate(vals):
            ax_t.text(v, i, f" {v:.4g} ms", va="center", fontsize=8)
        ax_t.set_yticks(range(n), labels=recipes, fontsize=8)
        ax_t.invert_yaxis()
        ax_t.set_xlim(right=max(vals + [0.0]) * 1.18 or 1.0)
        ax_t.set_title("total step time" + (" (modelled)" if spec.get("modelled") else ""), fontsize=10)
        ax_t.grid(axis="x", alpha=0.3)
    else:
        fig, ax = plt.subplots(figsize=(9, ops_h))
    for i, r in enumerate(recipes):
        ys = [k + (i - (n - 1) / 2) * height for k in range(len(ops))]
        vals = [v if finite(v) else 0.0 for v in spec["recipes"][r]]
        ax.barh(ys, vals, height=height, color=recipe_colour(r, i), label=r)
    ax.set_yticks(range(len(ops)), labels=ops, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(spec.get("unit", "ms") + (" (modelled from a calibration file)" if spec.get("modelled") else ""))
    ax.set_title("time per op (the smaller ops summed by kind)" if totals else spec.get("title", "Step time per op"),
                 fontsize=10 if totals else 12)
    ax.legend(fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    if totals:
        fig.suptitle(spec.get("title", "Step time"), fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_table(plt, spec, path):
    """A table as an image (the CPU-vs-GPU compare table): red cells where `bad_column` > 0."""
    header, rows = spec["header"], spec["rows"]
    bad_col = header.index(spec["bad_column"]) if spec.get("bad_column") in header else None
    # Size the figure to the text so the table fills it (about 0.075 inch per character at 8 pt).
    widths = [max([len(str(h))] + [len(str(r[i])) for r in rows if i < len(r)]) for i, h in enumerate(header)]
    fig_w = min(18.0, 0.5 + 0.08 * sum(w + 2 for w in widths))
    fig_h = 0.7 + 0.22 * (len(rows) + 1)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    ax.axis("off")
    colours = []
    for r in rows:
        bad = False
        if bad_col is not None:
            try:
                bad = float(str(r[bad_col]).replace(",", "")) > 0
            except ValueError:
                bad = False
        colours.append(["#f8d7d7" if bad else "#e3f2e1"] * len(header))
    table = ax.table(cellText=rows, colLabels=header, cellColours=colours or None, loc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    table.auto_set_column_width(list(range(len(header))))
    table.scale(1, 1.15)
    ax.set_title(spec.get("title", ""), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_accum(plt, spec, path):
    """`fp8sim accum`: relative error of the tensor cores' accumulation against K, one panel per data kind."""
    ks = spec["ks"]
    kinds = list(spec["data"].items())
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.6 * len(kinds), 4.2), squeeze=False)
    palette = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]
    for ax, (kind, series) in zip(axes.flat, kinds):
        for i, s in enumerate(series):
            ys = [v if finite(v) and v > 0 else float("nan") for v in s["rel_l2"]]
            dashed = not s["config"].startswith("tc ")
            ax.plot(ks, ys, marker="o", ms=3.5, lw=1.4, ls="--" if dashed else "-", color=palette[i % len(palette)],
                    label=s["config"])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("K")
        ax.set_title(f"{kind} operands", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes.flat[0].set_ylabel("||Y - Y_exact|| / ||Y_exact||")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Accumulation error of FP8 GEMMs on Hopper's tensor cores (per-tensor E4M3 operands)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


DRAWERS = {
    "histograms": plot_histograms,
    "table1": plot_table1,
    "gemm_error": plot_gemm_error,
    "layer_gemm_heatmap": plot_layer_gemm_heatmap,
    "memory": plot_memory,
    "speed": plot_speed,
    "compare": plot_table,
    "accum": plot_accum,
}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plot_data")
    ap.add_argument("out_dir")
    ap.add_argument("--manifest", help="write {file: {ok, error}} here (default OUT_DIR/plots_manifest.json)")
    ap.add_argument("--only", nargs="*", help="draw only these plot_data keys")
    args = ap.parse_args(argv)
    try:
        with open(args.plot_data) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"plots.py: cannot read {args.plot_data}: {e}", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy  # noqa: F401  (matplotlib needs it; say so here rather than mid-plot)
    except Exception as e:  # ImportError, or a broken install
        print(f"matplotlib is not available to {sys.executable}: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_NO_MATPLOTLIB
    if isinstance(data.get("plot_data"), dict):  # a command's whole document (fp8sim accum --json)
        data = data["plot_data"]
    plt.rcParams.update({"font.size": 9, "figure.facecolor": "white", "svg.hashsalt": "fp8sim"})
    colours = data.get("recipe_colours")
    if isinstance(colours, dict):
        RECIPE_COLOURS.update({k: v for k, v in colours.items() if isinstance(v, str)})

    todo = [(k, v) for k, v in data.items() if k in DRAWERS and (not args.only or k in args.only)]
    manifest = {"matplotlib": matplotlib.__version__, "python": sys.version.split()[0], "plots": {}}
    failed = 0
    for i, (key, spec) in enumerate(todo):
        print(f"plot {i + 1}/{len(todo)} {key}", flush=True)
        name = os.path.basename(spec.get("file", key + ".png"))
        path = os.path.join(args.out_dir, name)
        try:
            DRAWERS[key](plt, spec, path)
            manifest["plots"][name] = {"ok": True}
        except Exception as e:
            failed += 1
            plt.close("all")
            manifest["plots"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            traceback.print_exc()
    manifest_path = args.manifest or os.path.join(args.out_dir, "plots_manifest.json")
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
    return EXIT_SOME_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
