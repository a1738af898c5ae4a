"""One self-contained HTML page per directory (render second: everything shown comes from the
typed results of `simstudy.report.dashboard.data`). Plotly draws every plot; plotly.js and the data are
inlined, so the file opens from disk with no server and no network. The little JavaScript here
only wires controls to Plotly: re-binning the timeline on zoom, sorting the results table,
filtering a study by its axes and choosing a scenario."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from simstudy.report.dashboard.data import (
    SHOWN_BINS,
    Kind,
    Pyramid,
    RunData,
    StudyData,
    TraceData,
)
from simstudy.report.files import write_text

_OP_COLORS = {"allreduce": "#1f77b4", "allgather": "#17becf", "reducescatter": "#9467bd", "alltoall": "#8c564b",
              "push": "#ff7f0e", "pull": "#2ca02c", "p2p": "#d62728", "tcp": "#7f7f7f", "control": "#bcbd22",
              "broadcast": "#e377c2"}

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f2f2f2;cursor:pointer}tr.failed td{background:#fde2e2}td.fail{color:#b00;font-weight:bold}
td.pass{color:#070}.facts span{margin-right:1.5em}.note{color:#666;font-size:.9em}.plot{width:100%;min-height:360px}
select{margin-right:1em}
"""

_JS = (Path(__file__).parent / "dashboard.js").read_text(encoding="utf-8")

_STUDY_JS = (Path(__file__).parent / "study.js").read_text(encoding="utf-8")


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _list(a: Any, digits: int = 6) -> list[float | None]:
    return [None if not math.isfinite(v) else round(float(v), digits) for v in np.asarray(a, dtype=np.float64)]


def _fig_div(div: str, fig: go.Figure) -> str:
    spec = fig.to_plotly_json()
    data = json.dumps(spec["data"], default=str)
    return (f'<div id="{div}" class="plot"></div><script>Plotly.newPlot("{div}",{data},'
            f'{json.dumps(spec["layout"], default=str)},{{responsive:true}});</script>')


def _pyramid_json(p: Pyramid) -> str:
    colors: dict[str, str] = {}
    levels = []
    for lv in p.levels:
        for s in lv.rates:
            op = s.split(" ")[-1]
            colors.setdefault(s, _OP_COLORS.get(op, "#444"))
        n = len(next(iter(lv.rates.values()))) if lv.rates else 0
        levels.append({"bin_ms": lv.bin_s * 1e3, "t0_ms": lv.t0_s * 1e3, "n": n,
                       "rates": {s: _list(v * 8 / 1e9, 4) for s, v in lv.rates.items()}, "hover": list(lv.hover)})
    return json.dumps({"levels": levels, "shown": SHOWN_BINS, "colors": colors})


def _facts(facts: dict[str, str]) -> str:
    return '<p class="facts">' + "".join(f"<span><b>{html.escape(k)}</b>: {html.escape(v)}</span>"
                                         for k, v in facts.items()) + "</p>"


def _table(frame: pd.DataFrame, table_id: str, *, failed: pd.Series | None = None) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for i, (_, r) in enumerate(frame.iterrows()):
        cls = ' class="failed"' if failed is not None and bool(failed.iloc[i]) else ""
        cells = []
        for v in r:
            if isinstance(v, float):
                cells.append(f'<td data-v="{v}">{"" if math.isnan(v) else f"{v:.4g}"}</td>')
            else:
                cells.append(f"<td>{html.escape(str(v))}</td>")
        rows.append(f'<tr data-i="{i}"{cls}>{"".join(cells)}</tr>')
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _run_body(d: RunData) -> str:
    parts = [_facts(d.facts)]
    if d.jobs:
        parts += ["<h2>Jobs</h2>", _table(pd.DataFrame(d.jobs), "jobs")]
    if d.timeline is not None and d.timeline.levels[0].rates:
        note = f'<p class="note">{html.escape(d.timeline.note)}</p>' if d.timeline.note else ""
        parts += ["<h2>Throughput</h2>", '<p class="note">Zoom (drag) to re-bin: the page switches to finer bins, '
                  f'down to {d.timeline.finest.bin_s * 1e3:g} ms. Double-click for the whole run.</p>', note,
                  '<div id="throughput" class="plot"></div>',
                  f"<script>const PYR={_pyramid_json(d.timeline)};drawPyramid('throughput',PYR);</script>"]
    elif d.timeline is None:
        parts += ['<p class="note">This run kept no traffic rows (traffic: links or none): no throughput timeline '
                  "by op.</p>"]
    if d.matrix is not None and len(d.matrix.labels):
        fig = go.Figure(go.Heatmap(z=d.matrix.bytes / 1e6, x=list(d.matrix.labels), y=list(d.matrix.labels),
                                   colorscale="Viridis", colorbar={"title": {"text": "MB"}},
                                   hovertemplate="%{y} -> %{x}: %{z:.3f} MB<extra></extra>"))
        fig.update_layout(title="Traffic matrix (bytes from row rank to column rank)", xaxis_title="destination",
                          yaxis_title="source", yaxis_autorange="reversed", margin={"t": 40})
        parts += ["<h2>Traffic matrix</h2>", _fig_div("matrix", fig)]
    if d.links is not None:
        lv = d.links
        fig = go.Figure([go.Scatter(x=_list(lv.times_s * 1e3), y=_list(u), name=n, mode="lines")
                         for n, u in lv.utilization.items()])
        fig.update_layout(title="Utilisation of the hottest links", xaxis_title="time (ms)",
                          yaxis_title="utilisation", margin={"t": 40})
        hot = pd.DataFrame({"link": lv.names, "tier": lv.tiers, "mean utilisation": lv.mean_utilization,
                            "peak utilisation (one bin)": lv.peak_utilization})
        tiers = pd.DataFrame({"tier": list(lv.tier_bytes), "bytes": list(lv.tier_bytes.values())})
        parts += ["<h2>Links</h2>"]
        if lv.note:
            parts.append(f'<p class="note" id="links-note">{html.escape(lv.note)}</p>')
        parts += [_fig_div("links", fig), "<h3>Hottest links</h3>", _table(hot, "hottest"),
                  "<h3>Bytes per tier</h3>", _table(tiers, "tiers")]
    if d.gantt is not None and d.gantt.rank:
        g = d.gantt
        traces = []
        for kind, color in (("compute", "#9ecae1"), ("collective", "#fd8d3c"), ("send", "#e6550d"),
                            ("recv", "#31a354")):
            idx = [i for i, k in enumerate(g.kind) if k == kind]
            if not idx:
                continue
            traces.append(go.Bar(orientation="h", name=kind, marker_color=color,
                                 y=[f"rank {g.rank[i]}" for i in idx],
                                 x=[(g.end_s[i] - g.start_s[i]) * 1e3 for i in idx],
                                 base=[g.start_s[i] * 1e3 for i in idx], text=[g.name[i] for i in idx],
                                 hovertemplate="%{text}<br>%{base:.3f} ms + %{x:.3f} ms<extra></extra>"))
        fig = go.Figure(traces)
        fig.update_layout(barmode="overlay", title=f"Compute and communication of iteration {g.iteration} "
                          f"(its slot: finish / iterations; {g.ranks_shown} of {g.ranks_total} ranks)",
                          xaxis_title="time (ms)", xaxis_range=[g.window_s[0] * 1e3, g.window_s[1] * 1e3],
                          yaxis_autorange="reversed", height=max(300, 22 * g.ranks_shown + 120), margin={"t": 40})
        parts += ["<h2>One iteration, rank by rank</h2>", _fig_div("gantt", fig)]
    return "\n".join(parts)


def _study_body(d: StudyData) -> str:
    s = d.table
    parts = []
    if d.description:
        parts.append(f"<p>{html.escape(d.description)}</p>")
    n_ok = int((s["status"] == "ok").sum()) if len(s) else 0
    n_failed = int((s["status"] == "failed").sum()) if len(s) else 0
    parts.append(_facts({"scenarios": str(len(s)), "finished": str(n_ok), "failed": str(n_failed)}))
    if d.findings:
        parts += ["<h2>Findings</h2>", "<ul>", *(f"<li>{html.escape(f)}</li>" for f in d.findings), "</ul>"]
    if len(s) == 0:
        parts.append('<p class="note">This study has no scenarios: nothing to show.</p>')
        return "\n".join(parts)
    if n_ok == 0:
        parts.append('<p class="note">No scenario of this study finished: see the errors in the table.</p>')
    shown = [c for c in ("index", *d.params, "status", *d.metrics, "bytes_per_iter", "error") if c in s.columns]
    table = s[shown]
    parts += ["<h2>Results</h2>", '<p class="note">Click a column to sort. Choose axis values to filter.</p>']
    selects = []
    for p in d.params:
        opts = "".join(f'<option value="{html.escape(str(v))}">{html.escape(str(v))}</option>'
                       for v in dict.fromkeys(s[p].astype(str)))
        selects.append(f'<label>{html.escape(p)} <select class="axis" data-axis="{html.escape(p)}">'
                       f'<option value="*">all</option>{opts}</select></label>')
    metric_opts = "".join(f'<option value="{html.escape(m)}">{html.escape(m)}</option>'
                          for m in d.metrics if m in s.columns)
    parts += ["<div>" + "".join(selects) + "</div>",
              _table(table, "results", failed=(s["status"] != "ok")),
              "<h2>Comparison</h2>", f'<label>metric <select id="metric">{metric_opts}</select></label>',
              '<div id="comparison" class="plot"></div>',
              "<h2>Timeline of a scenario</h2>", '<label>scenario <select id="scenario"></select></label>',
              '<div id="timeline" class="plot"></div>']
    rows = []
    for _, r in s.iterrows():
        row: dict[str, Any] = {"key": str(r.get("key", "")), "status": str(r["status"]),
                               "__label": ", ".join(f"{p}={r[p]}" for p in d.params) or str(r.get("key", ""))}
        for p in d.params:
            row[p] = str(r[p])
        for m in d.metrics:
            if m in s.columns:
                v = r[m]
                row[m] = _num(float(v)) if isinstance(v, int | float | np.integer | np.floating) else None
        rows.append(row)
    timelines = {t.key: {"label": t.label, "bin_ms": t.bin_s * 1e3, "t0_ms": t.t0_s * 1e3,
                         "rates": _list(t.rates * 8 / 1e9, 4)} for t in d.timelines}
    data = json.dumps({"rows": rows, "timelines": timelines})
    parts.append(f"<script>const STUDY={data};{_STUDY_JS}</script>")
    return "\n".join(parts)


def _trace_body(d: TraceData) -> str:
    parts = [_facts(d.facts)]
    fig = go.Figure([go.Scatter(x=_list(t * 1e3), y=_list(r * 8 / 1e9, 4), name=k, mode="lines")
                     for k, (t, r) in d.timelines.items()])
    fig.update_layout(title=f"Throughput ({d.step_label})", xaxis_title="time (ms)", yaxis_title="Gbit/s",
                      margin={"t": 40})
    parts += ["<h2>Throughput</h2>", _fig_div("throughput", fig)]
    if d.ports is not None:
        parts += ["<h2>Ports</h2>", '<p class="note">Utilisation of the busier direction; a period is the shortest '
                  "autocorrelation peak of the port's throughput as high as the highest, at 2 steps or more "
                  "(strength under 0.2: none).</p>", _table(d.ports.round(4), "ports")]
    elif d.overlay is not None:
        o = d.overlay
        traces = []
        for k, curves in o.each.items():
            for i, c in enumerate(curves):
                traces.append(go.Scatter(x=_list(o.offsets_s * 1e3), y=_list(c * 8 / 1e9, 4), mode="lines",
                                         line={"width": 0.5}, opacity=0.3, name=f"{k} iteration {i}",
                                         legendgroup=k, showlegend=False))
        for k, m in o.mean.items():
            traces.append(go.Scatter(x=_list(o.offsets_s * 1e3), y=_list(m * 8 / 1e9, 4), mode="lines",
                                     line={"width": 2.5}, name=f"{k} (mean over iterations)", legendgroup=k))
        fig = go.Figure(traces)
        fig.update_layout(title="Throughput through one iteration, aligned at iteration starts",
                          xaxis_title="time since the iteration's start (ms)", yaxis_title="Gbit/s", margin={"t": 40})
        parts += ["<h2>Per iteration</h2>", _fig_div("per_iteration", fig)]
    elif d.ports is None:
        parts.append('<p class="note">No iteration period was found: no per-iteration overlay.</p>')
    if d.report is not None:
        frame = d.report.to_frame()
        status = ["pass" if p else "fail" for p in frame["passed"]] if "passed" in frame.columns else []
        parts += [f"<h2>Metrics: {html.escape(d.report.verdict)}</h2>",
                  '<p class="note">Recomputed from the two features files with the default tolerances; the verdict is '
                  "on the judged (job-level) metrics.</p>", _table(frame, "metrics")]
        if status:
            parts.append("<script>document.querySelectorAll('#metrics tbody tr').forEach((tr,i)=>{"
                         f"const s={json.dumps(status)}[i];tr.cells[tr.cells.length-1].classList.add(s);"
                         "tr.dataset.status=s;});</script>")
    return "\n".join(parts)


def render(kind: Kind, data: RunData | StudyData | TraceData) -> str:
    """The whole page, plotly.js and data inlined."""
    if isinstance(data, StudyData):
        body = _study_body(data)
    elif isinstance(data, RunData):
        body = _run_body(data)
    else:
        body = _trace_body(data)
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(data.title)}</title>'
            f"<style>{_CSS}</style><script>{get_plotlyjs()}</script><script>{_JS}</script></head>"
            f'<body data-kind="{kind}"><h1>{html.escape(data.title)}</h1>'
            f'<p class="note">{html.escape(str(data.path))} ({kind})</p>{body}'
            "<script>document.querySelectorAll('th').forEach(th=>th.addEventListener('click',()=>sortTable(th)));"
            "</script></body></html>")


def write(kind: Kind, data: RunData | StudyData | TraceData, out: Path) -> Path:
    """Write the page atomically (a failed render never leaves half a file)."""
    text = render(kind, data)
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_text(out, text)
