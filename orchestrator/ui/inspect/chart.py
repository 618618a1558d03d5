"""The chart of a run: prompt and cached tokens and cost per step, as inline SVG, for the report page and
for `cairn serve` (which shows it as an image of its own)."""

from __future__ import annotations

import html
from typing import Any

from orchestrator.ui.terminal import visible_bidi


def esc(value: Any) -> str:
    """Text for the page: escaped, bidirectional controls shown as their codes (ui/terminal.py)."""
    return visible_bidi(html.escape("" if value is None else str(value), quote=True))


def chart(steps: list[dict[str, Any]], compactions: list[dict[str, Any]]) -> str:
    """Prompt and cached tokens (lines, left axis) and cost (bars, right axis) per step; compactions
    as dashed lines. Plain inline SVG; `cairn serve` shows it too, as an image of its own."""
    if not steps:
        return '<p class="meta">(no model calls yet)</p>'
    width, height, left, right, top, bottom = 1000, 260, 64, 64, 14, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    n = len(steps)
    max_tok = max(max(s["usage"]["prompt_tokens"] for s in steps), 1)
    costs = [s["usage"]["cost_usd"] for s in steps]
    max_cost = max((c for c in costs if c is not None), default=0.0) or 0.0

    def x(i: int) -> float:
        return left + (plot_w * (i + 0.5) / n)

    def y_tok(v: float) -> float:
        return top + plot_h - plot_h * v / max_tok

    out = [f'<svg id="chart" viewBox="0 0 {width} {height}" width="100%" role="img" '
           f'aria-label="prompt tokens, cached tokens and cost per step">']
    for k in range(5):  # grid and left axis labels
        v = max_tok * k / 4
        yy = y_tok(v)
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eef0f3"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
        if max_cost:
            out.append(f'<text x="{width - right + 6}" y="{yy + 4:.1f}">${max_cost * k / 4:.3g}</text>')
    bar_w = max(plot_w / n * 0.5, 1.0)
    for i, (s, c) in enumerate(zip(steps, costs)):
        if c is not None and max_cost:
            h = plot_h * c / max_cost
            out.append(f'<rect class="cost" x="{x(i) - bar_w / 2:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w:.1f}" '
                       f'height="{h:.1f}" fill="#e08a00" fill-opacity="0.35"><title>step {s["index"]}: ${c:.5f}</title></rect>')
    for key, colour in (("prompt_tokens", "#2f6fdf"), ("cached_tokens", "#2e9b5b")):
        points = " ".join(f"{x(i):.1f},{y_tok(s['usage'][key]):.1f}" for i, s in enumerate(steps))
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>')
        for i, s in enumerate(steps):
            out.append(f'<a href="#step-{s["index"]}"><circle cx="{x(i):.1f}" cy="{y_tok(s["usage"][key]):.1f}" r="3" '
                       f'fill="{colour}"><title>step {s["index"]}: {s["usage"][key]:,} {key.replace("_", " ")}'
                       f"</title></circle></a>")
    index_of = {s["index"]: i for i, s in enumerate(steps)}
    for c in compactions:
        i = index_of.get(c["step"])
        if i is None:
            i = min(range(n), key=lambda j: abs(steps[j]["index"] - c["step"]))
        xx = x(i) - plot_w / n / 2
        out.append(f'<line class="compaction" x1="{xx:.1f}" x2="{xx:.1f}" y1="{top}" y2="{top + plot_h}" '
                   f'stroke="#d03b3b" stroke-dasharray="4 3"><title>compaction before step {c["step"]} '
                   f'({esc(c["kind"])}): {c["tokens_before"]:,} → {c["tokens_after"]:,} tokens</title></line>')
        out.append(f'<text x="{xx + 3:.1f}" y="{top + 10}" style="fill:#d03b3b">⟲</text>')
    every = max(1, n // 20)
    for i, s in enumerate(steps):
        if i % every == 0 or i == n - 1:
            out.append(f'<text x="{x(i):.1f}" y="{height - 10}" text-anchor="middle">{s["index"]}</text>')
    out.append("</svg>")
    out.append('<div class="legend"><span><i style="background:#2f6fdf"></i>prompt tokens</span>'
               '<span><i style="background:#2e9b5b"></i>cached tokens</span>'
               '<span><i style="background:#e08a00;opacity:.5;height:9px"></i>cost (right axis)</span>'
               '<span><i style="background:#d03b3b"></i>compaction</span></div>')
    return "\n".join(out)
