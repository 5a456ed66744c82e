"""Predicted-vs-actual window plots (matplotlib, imported only when a plot is asked for)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from parsl_malleable.windows.evaluate import EvalResult


def plot_predicted_vs_actual(result: EvalResult, path: str | Path) -> None:
    """Three log-log density panels (naive, corrected quantile, corrected expected-harvest) of
    predicted against actual windows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = result.pairs[~result.pairs["censored"]]
    lo, hi = 60.0, result.config.horizon
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6), sharey=True)
    labels = (
        ("naive", "naive (limits only)"),
        ("corrected", f"corrected q={result.config.quantile:g}"),
        ("expected", "corrected expected-harvest"),
    )
    for ax, (col, label) in zip(axes, labels, strict=True):
        x = np.clip(pairs["actual"].to_numpy(), lo, hi) / 3600
        y = np.clip(pairs[col].to_numpy(), lo, hi) / 3600
        if len(x):
            ax.hexbin(
                x,
                y,
                xscale="log",
                yscale="log",
                gridsize=40,
                bins="log",
                cmap="viridis",
                mincnt=1,
                extent=(np.log10(lo / 3600), np.log10(hi / 3600)) * 2,
            )
        ax.plot([lo / 3600, hi / 3600], [lo / 3600, hi / 3600], "r--", lw=1)
        over = float(np.mean(y > x)) if len(x) else float("nan")
        ax.set_title(f"{label}: {100 * over:.0f}% over-predicted")
        ax.set_xlabel("actual window (h)")
    axes[0].set_ylabel("predicted window (h)")
    fig.suptitle(f"{result.trace}: {len(pairs):,} idle-node windows ({result.config.policy})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
