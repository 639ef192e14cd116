"""The answers benchmark's charts: each technique off and on as bars with their intervals, and the learning
curve with its fitted projection; the best no-training row drawn across both."""

from __future__ import annotations

from pathlib import Path

from solution.experiments.answers.techniques import NO_TECHNIQUE, REFERENCES


def figure_key(rows: list) -> str:
    """The figure the charts draw: test F1 where any row has a test gold, else dev tuned (the real corpus)."""
    return "test_f1" if any(r.get("test_f1") is not None for r in rows) else "dev_f1_tuned"


def bounds(r: dict, key: str) -> tuple:
    """The 95% interval of r[key]; the figure itself where the row has none (a record older than intervals)."""
    ci_key = "test_f1_ci" if key == "test_f1" else "dev_f1_ci"
    return tuple(r.get(ci_key) or (r[key], r[key]))


def chart_groups(rows: list) -> list:
    """(label, off rows, on rows) of each bar pair: a technique's seeds, or one ensemble against its members."""
    names = [n for n in dict.fromkeys(r["technique"] for r in rows) if n not in NO_TECHNIQUE]
    groups = [(n, [r for r in rows if r["technique"] == n and r["enabled"] is False],
               [r for r in rows if r["technique"] == n and r["enabled"] is True]) for n in names]
    members = {r["seed"]: r for r in rows if r["technique"] == "ensemble" and r["enabled"] is False}
    for r in rows:
        if r["technique"] == "ensemble" and r["enabled"]:
            seeds = [int(s) for s in str(r["seed"]).split("+")]
            groups.append((f"ensemble {r['seed']}", [members[s] for s in seeds if s in members], [r]))
    return groups


def bar(group: list, key: str) -> tuple:
    """(mean over the rows, [down, up]): the error bar spans the lowest and highest bound of their intervals."""
    xs = [r for r in group if r.get(key) is not None]
    if not xs:
        return float("nan"), [0.0, 0.0]
    mean = sum(r[key] for r in xs) / len(xs)
    lo, hi = min(bounds(r, key)[0] for r in xs), max(bounds(r, key)[1] for r in xs)
    return mean, [max(mean - lo, 0.0), max(hi - mean, 0.0)]


def reference_line(ax, rows: list, key: str) -> None:
    """The best no-training row on `key` as a dashed line, its interval shaded."""
    refs = [r for r in rows if r["technique"] in REFERENCES and r.get(key) is not None]
    if refs:
        best = max(refs, key=lambda r: r[key])
        lo, hi = bounds(best, key)
        ax.axhline(best[key], color="grey", linestyle="--",
                   label=f"{best['technique']}, the best with no training ({best[key]:.3f})")
        ax.axhspan(lo, hi, color="grey", alpha=0.12)


def pyplot():
    """matplotlib's pyplot on the file backend: no display on a training box."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def finish(plt, fig, ax, path: Path, title: str) -> None:
    """Limits, title and legend as both charts have them; the figure saved to `path` and closed."""
    import textwrap

    ax.set_ylim(0, 1)
    # ~11 characters an inch at the title's size: a longer title goes on two lines, not off the figure's edge
    ax.set_title(textwrap.fill(title, int(fig.get_figwidth() * 11)))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def chart(rows: list, path: Path, title: str) -> None:
    """Bars: each technique off and on (mean over seeds; error bars: 95% intervals, widest over seeds),
    test F1 where there is a test gold, else dev tuned; the best no-training row as a line."""
    plt = pyplot()
    key, groups = figure_key(rows), chart_groups(rows)
    # at least the curve chart's width: a record of one or two techniques keeps its title whole
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(groups) + 2), 4.5))
    for k, side in enumerate(("off", "on")):
        bars = [bar(g[1 + k], key) for g in groups]
        ax.bar([i + (k - 0.5) * 0.38 for i in range(len(groups))], [b[0] for b in bars], 0.38, label=side,
               yerr=[[b[1][0] for b in bars], [b[1][1] for b in bars]], capsize=3)
    reference_line(ax, rows, key)
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], rotation=25, ha="right")
    ax.set_ylabel(key.replace("_", " ") + " (mean over seeds, 95% CI)")
    finish(plt, fig, ax, path, title)


def curve_points(rows: list, key: str) -> list:
    """The learning curve's rows by pages: one seed's, the first seed's (a merged record may hold another
    seed's baseline as a curve point too)."""
    curve = [r for r in rows if r["technique"] == "learning_curve" and r.get(key) is not None]
    return sorted((r for r in curve if r.get("seed") == curve[0].get("seed")), key=lambda r: r["num_train_documents"])


def curve_projection(rows: list, target: float = 0.80) -> dict | None:
    """A projection, not a measurement: test F1 fitted as a + b log2(pages) over the learning curve's points,
    and training seconds as c + d pages (stage 1 is the constant); the pages and seconds at which the fitted
    line reaches `target`, if it rises. None with fewer than three points."""
    import numpy as np
    key = figure_key(rows)
    points = curve_points(rows, key)
    if len(points) < 3:
        return None
    pages = np.array([r["num_train_documents"] for r in points], dtype=float)
    b, a = np.polyfit(np.log2(pages), [r[key] for r in points], 1)
    out = {"metric": key, "target": target, "points": len(points), "per_doubling": float(b), "intercept": float(a)}
    if b > 1e-9:  # a flat curve fits a slope of rounding error (1e-17), which projects 2^(1e16) pages
        need = float(2 ** ((target - a) / b))
        d, c = np.polyfit(pages, [r.get("train_seconds") or 0.0 for r in points], 1)
        out |= {"pages_for_target": round(need), "train_seconds_for_target": round(float(c + d * need))}
    return out


def curve_chart(rows: list, path: Path, title: str) -> None:
    """F1 against the number of training pages, with 95% intervals; the best no-training row as a line."""
    plt = pyplot()
    key = figure_key(rows)
    points = curve_points(rows, key)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ys = [r[key] for r in points]
    ax.errorbar([r["num_train_documents"] for r in points], ys, capsize=4, marker="o", label="baseline recipe",
                yerr=[[y - bounds(r, key)[0] for y, r in zip(ys, points)],
                      [bounds(r, key)[1] - y for y, r in zip(ys, points)]])
    reference_line(ax, rows, key)
    fit = curve_projection(rows)
    if fit and "pages_for_target" in fit:  # dashed: the fitted line, carried to the target
        import numpy as np
        xs = np.geomspace(points[0]["num_train_documents"], max(fit["pages_for_target"], points[-1]["num_train_documents"]), 50)
        ax.plot(xs, fit["intercept"] + fit["per_doubling"] * np.log2(xs), "--", color="gray",
                label=f"fit, +{fit['per_doubling']:.3f} a doubling: {fit['target']:.2f} at ~{fit['pages_for_target']:,} pages")
        ax.set_xscale("log", base=2)
    ax.set_xlabel("training pages")
    ax.set_ylabel(key.replace("_", " ") + " (95% CI)")
    finish(plt, fig, ax, path, title)
