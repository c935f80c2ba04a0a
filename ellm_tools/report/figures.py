"""PNG figures (matplotlib, Agg backend), each with the data it plots written beside it as JSON
(``<name>.png`` + ``<name>.json``), so a figure can be checked or re-plotted without the image.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ellm.run.atomic import atomic_write, write_text
from ellm_tools.report.aggregate import Curve


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("the report draws its figures with matplotlib: "
                          "pip install 'ellm[report]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _text(label: str) -> str:
    """A label from the runs' records drawn as written: a ``$`` would start matplotlib's maths
    (and a malformed formula stops the figure)."""
    return label.replace("$", r"\$")


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_text(path, json.dumps(data, indent=1) + "\n")


def line_figure(path: Path, curves: Sequence[Curve], title: str, ylabel: str,
                xlabel: str = "frames", integer_x: bool = False) -> Path:
    """Mean over runs per method, shaded mean +- std; curves at one x are bars: a line needs
    two x values."""
    if len({x for curve in curves for x in curve.frames}) == 1:
        return _one_x_figure(path, curves, title, ylabel, xlabel)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    markers = []
    for curve in curves:
        x = np.asarray(curve.frames, dtype=float)
        mean, std = np.asarray(curve.mean), np.asarray(curve.std)
        markers.append("o" if len(x) < 30 else None)  # few points: show each, not just a line
        line, = ax.plot(x, mean, marker=markers[-1], markersize=5,
                        label=_text(f"{curve.method} (n={len(curve.runs)})"))
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
    if integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(_text(xlabel))
    ax.grid(alpha=0.3)
    low, high = ax.get_xlim()
    return _save(fig, ax, path, title, ylabel, bool(curves), {
        "title": title, "kind": "line", "xlabel": xlabel, "ylabel": ylabel,
        "xticks": [float(t) for t in ax.get_xticks() if low <= t <= high],
        "spread": "mean +- std over runs (ddof=0)",
        "series": [{**c.as_dict(), "marker": m} for c, m in zip(curves, markers)]})


def _one_x_figure(path: Path, curves: Sequence[Curve], title: str, ylabel: str,
                  xlabel: str) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(curves) + 2), 4.2))
    x = np.arange(len(curves))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ax.bar(x, [c.mean[0] for c in curves], 0.6, yerr=[c.std[0] for c in curves], capsize=4,
           color=[colors[i % len(colors)] for i in range(len(curves))])
    ax.set_xticks(x, [_text(f"{c.method}\n(n={len(c.runs)})") for c in curves], fontsize=8)
    at = f"{xlabel} = {curves[0].frames[0]:g}"
    ax.set_xlabel(_text(f"all at {at}"))
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, ax, path, title, ylabel, False, {
        "title": title, "kind": "bars", "at": at, "ylabel": ylabel,
        "spread": "mean +- std over runs (ddof=0)",
        "series": [c.as_dict() for c in curves]})


def bar_figure(path: Path, categories: Sequence[str], series: Mapping[str, Mapping[str, float]],
               title: str, ylabel: str, n_runs: Mapping[str, int]) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(8.0, 0.55 * len(categories)), 4.5))
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(categories))
    for i, (method, values) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, [values.get(c, 0.0) for c in categories],
               width, label=_text(f"{method} (n={n_runs.get(method, 0)})"))
    ax.set_xticks(x, [c.replace("_", " ") for c in categories], rotation=60, ha="right",
                  fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, ax, path, title, ylabel, bool(series), {
        "title": title, "ylabel": ylabel, "categories": list(categories),
        "series": [{"method": m, "n_runs": n_runs.get(m, 0), "values": dict(v)}
                   for m, v in series.items()]})


def fitted_title(title: str, fig_width: float) -> str:
    width = max(20, int(fig_width * 10))
    return "\n".join(textwrap.fill(line, width) for line in title.splitlines())


def _save(fig, ax, path: Path, title: str, ylabel: str, legend: bool, data: dict) -> Path:
    """Label, save and close a figure; write the data behind it next to it as JSON."""
    ax.set_ylabel(_text(ylabel))
    ax.set_title(_text(fitted_title(title, fig.get_figwidth())))
    if legend:
        ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_write(path) as f:  # a symlink at path is replaced, never written through
        fig.savefig(f, dpi=120, format="png")
    _pyplot().close(fig)
    _write_json(path.with_suffix(".json"), data)
    return path
