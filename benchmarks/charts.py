"""SVG charts of benchmark results, written by hand (no plotting dependency).

Per model: ``<model>_traffic.svg`` (HBM bytes of each baseline over the compulsory bytes, with
the matmul-boundary reference marked; L2-served bytes are not traffic either bound counts, and
records made before the HBM/L2 split have no bar) and, where the cost model gave estimates,
``<model>_speedup.svg`` (estimated speedup over op-by-op on Ascend910B1, labelled ESTIMATE).

Example
-------
>>> svg = bar_chart("demo", ["a"], {"x": [2.0]}, "times", reference=1.0)
>>> svg.startswith("<svg")
True
"""
from __future__ import annotations

import os
import tempfile
from html import escape

COLOURS = {"op_by_op": "#9e9e9e", "atc_style": "#e39b3b", "tvm_fuseops": "#5b8bd0",
           "conservative": "#4caf7a", "aggressive": "#2e7d4f"}
ORDER = ("op_by_op", "atc_style", "tvm_fuseops", "conservative", "aggressive")
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 760, 360, 70, 170, 40, 70


def _text(x, y, content, size=12, anchor="start", weight="normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-weight="{weight}" font-family="sans-serif">{escape(str(content))}</text>')


def bar_chart(title: str, groups: list[str], series: dict[str, list], y_label: str,
              reference=None, reference_label: str = "") -> str:
    """Grouped bars: one group per x label, one bar per series (``None`` values are left out,
    marked "n/a"); an optional dashed reference: one value for the whole chart, or a list
    with one value per group (a dashed segment over each group). Returns SVG text."""
    references = (reference if isinstance(reference, (list, tuple))
                  else [reference] * len(groups))
    values = [v for vals in series.values() for v in vals if v is not None]
    top = max(values + [r for r in references if r] + [1e-9]) * 1.15
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}">',
             f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
             _text(WIDTH / 2, 22, title, 14, "middle", "bold")]
    for tick in range(6):  # y axis with 5 intervals
        value = top * tick / 5
        y = TOP + plot_h - plot_h * tick / 5
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" '
                     'stroke="#e0e0e0"/>')
        parts.append(_text(LEFT - 6, y + 4, f"{value:.3g}", 10, "end"))
    parts.append(f'<text x="16" y="{TOP + plot_h / 2:.1f}" font-size="11" '
                 f'font-family="sans-serif" text-anchor="middle" transform="rotate(-90 16 '
                 f'{TOP + plot_h / 2:.1f})">{escape(y_label)}</text>')
    names = list(series)
    slot = plot_w / max(len(groups), 1)
    bar_w = slot * 0.8 / max(len(names), 1)
    for g_index, group in enumerate(groups):
        x0 = LEFT + slot * g_index + slot * 0.1
        parts.append(_text(x0 + slot * 0.4, TOP + plot_h + 16, group, 10, "middle"))
        for s_index, name in enumerate(names):
            value = series[name][g_index]
            x = x0 + bar_w * s_index
            if value is None:
                parts.append(_text(x + bar_w / 2, TOP + plot_h - 4, "n/a", 8, "middle"))
                continue
            h = plot_h * value / top
            parts.append(f'<rect x="{x:.1f}" y="{TOP + plot_h - h:.1f}" width="{bar_w * 0.9:.1f}"'
                         f' height="{h:.1f}" fill="{COLOURS.get(name, "#777")}">'
                         f'<title>{escape(name)} {escape(group)}: {value:.4g}</title></rect>')
    for g_index, value in enumerate(references):
        if not value:
            continue
        y = TOP + plot_h - plot_h * value / top
        x0 = LEFT + slot * g_index + slot * 0.05
        parts.append(f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x0 + slot * 0.9:.1f}" '
                     f'y2="{y:.1f}" stroke="#c62828" stroke-dasharray="6 4"/>')
    if any(references):
        y = TOP + 18 * len(series) + 30
        parts.append(f'<line x1="{WIDTH - RIGHT + 20}" y1="{y - 4}" x2="{WIDTH - RIGHT + 32}" '
                     f'y2="{y - 4}" stroke="#c62828" stroke-dasharray="3 2"/>')
        parts.append(_text(WIDTH - RIGHT + 38, y, reference_label, 11))
    parts.append(f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" '
                 f'y2="{TOP + plot_h}" stroke="black"/>')
    for index, name in enumerate(names):  # legend
        y = TOP + 18 * index + 30
        parts.append(f'<rect x="{WIDTH - RIGHT + 20}" y="{y - 10}" width="12" height="12" '
                     f'fill="{COLOURS.get(name, "#777")}"/>')
        parts.append(_text(WIDTH - RIGHT + 38, y, name, 11))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` through a temporary file and a rename, so readers never see half."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; tables and charts are for everyone
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _by_model(records: list[dict]) -> dict[str, dict[str, dict[str, dict]]]:
    """{model: {"config/dtype": {baseline: record}}} of the records that finished."""
    table: dict = {}
    for record in records:
        if record.get("status") == "ok":
            label = f"{record['config']}/{'fp16' if record['dtype'] == 'float16' else 'fp32'}"
            table.setdefault(record["model"], {}).setdefault(label, {})[record["baseline"]] = \
                record
    return table


def _ratio(numerator, denominator):
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def write_charts(results: dict, folder: str, soc: str = "Ascend910B1") -> list[str]:
    """Write each model's traffic chart and (where estimates exist) speedup chart into
    ``folder``; returns the paths written."""
    written = []
    for model, configs in sorted(_by_model(results.get("records", [])).items()):
        labels = list(configs)
        baselines = [b for b in ORDER if any(b in configs[c] for c in labels)]
        traffic = {b: [_ratio(configs[c].get(b, {}).get("hbm_bytes"),
                              configs[c].get(b, {}).get("compulsory_bytes")) for c in labels]
                   for b in baselines}
        boundary = [_ratio(next(iter(configs[c].values()))["matmul_boundary_bytes"],
                           next(iter(configs[c].values()))["compulsory_bytes"]) for c in labels]
        if any(v is not None for vals in traffic.values() for v in vals):
            path = os.path.join(folder, f"{model}_traffic.svg")
            write_text_atomic(path, bar_chart(
                f"{model}: HBM traffic / compulsory bytes (lower is better)", labels, traffic,
                "HBM bytes / compulsory bytes", boundary, "matmul boundary"))
            written.append(path)
        speedup = {}
        for b in baselines:
            speedup[b] = []
            for c in labels:
                base = (configs[c].get("op_by_op") or {}).get("est_latency_us") or {}
                mine = (configs[c].get(b) or {}).get("est_latency_us") or {}
                speedup[b].append(_ratio(base.get(soc), mine.get(soc)))
        if any(v is not None for vals in speedup.values() for v in vals):
            path = os.path.join(folder, f"{model}_speedup.svg")
            write_text_atomic(path, bar_chart(
                f"{model}: ESTIMATED speedup over op-by-op on {soc} (cost model)", labels,
                speedup, "estimated speedup (x)", 1.0, "op-by-op"))
            written.append(path)
    return written
