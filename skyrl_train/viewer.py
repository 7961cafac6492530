"""``skyrl-train view RUN``: one self-contained HTML page of a run, for a browser with no network.

The page (``RUN/view.html`` by default) holds the run's metrics (``metrics.jsonl``) and its rollout record
(:mod:`skyrl_train.record`) as JSON, and a script that shows:

- the run's facts (its costs among them, :mod:`skyrl_train.cost`) and learning curves (reward, loss,
  evaluation accuracy, CPU-seconds per step and per solved trajectory, against the step);
- a table of the recorded trajectories, filtered by step, reward, end state, environment and length;
- a trajectory: its chat messages (the model's turns, observations and tool results in place) and every
  response token coloured by the quantity chosen: the loss mask, the advantage, the gap between the sampler's
  and the trainer's log-prob, or the staleness (the step's policy version minus the token's).

``#traj=K`` in the address opens trajectory ``K`` of the table. ``--serve`` serves the page on 127.0.0.1.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

__all__ = ["build_view", "serve_view", "write_view"]

DEFAULT_MAX_TRAJECTORIES = 5000
"""Trajectories embedded at most (the newest steps first are kept); the page says how many were left out."""


def _token_texts(run_dir: Path, rows: list[dict[str, Any]]) -> list[list[str]] | None:
    """Each recorded response's tokens as text, by the run's own tokenizer; None when it cannot be loaded."""
    try:
        import yaml

        from skyrl_train.models import load_tokenizer

        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        tokenizer = load_tokenizer(config["trainer"]["policy"]["model"]["path"])
    except Exception:  # the page still shows the ids
        return None
    return [[tokenizer.decode([i]) for i in row["response_ids"]] for row in rows]


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def build_view(run_dir: str | Path, *, max_trajectories: int = DEFAULT_MAX_TRAJECTORIES) -> str:
    """The HTML page of the run in ``run_dir``."""
    from skyrl_train.record import read_rollouts
    from skyrl_train.tracking import METRICS_FILE, read_metrics

    run_dir = Path(run_dir)
    metrics_path = run_dir / METRICS_FILE
    metrics = read_metrics(metrics_path) if metrics_path.exists() else []
    rows = read_rollouts(run_dir) if (run_dir / "rollouts").exists() else []
    left_out = max(0, len(rows) - max_trajectories)
    rows = rows[left_out:]
    texts = _token_texts(run_dir, rows) if rows else []
    for i, row in enumerate(rows):
        row["tokens"] = texts[i] if texts else [str(t) for t in row["response_ids"]]
        row.pop("prompt_ids")  # the prompt is in the messages; its ids are in the record
    summary_path = run_dir / "summary.json"
    data = {
        "run": run_dir.name,
        "metrics": metrics,
        "trajectories": rows,
        "left_out": left_out,
        "summary": json.loads(summary_path.read_text()) if summary_path.exists() else None,
    }
    payload = json.dumps(_finite(data), default=str, allow_nan=False).replace("</", "<\\/")
    return _PAGE.replace("__TITLE__", html.escape(run_dir.name)).replace("__DATA__", payload)


def write_view(run_dir: str | Path, out: str | Path | None = None, **kwargs: Any) -> Path:
    """Write the page of ``run_dir`` to ``out`` (default ``run_dir/view.html``); returns its path."""
    path = Path(out) if out is not None else Path(run_dir) / "view.html"
    path.write_text(build_view(run_dir, **kwargs), encoding="utf-8")
    return path


def serve_view(path: str | Path, port: int = 8765) -> None:
    """Serve the folder of the page ``path`` on 127.0.0.1:``port`` until interrupted."""
    import functools
    import http.server

    path = Path(path)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(path.parent))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"view: http://127.0.0.1:{port}/{path.name} (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


_PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__: skyrl-train view</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.4em}
table{border-collapse:collapse} td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f3f3f3} tr.pick{cursor:pointer} tr.pick:hover{background:#eef}
.filters label{margin-right:1em} .filters input{width:5em} .curves svg{border:1px solid #ddd;margin:0 8px 8px 0}
.msg{border-left:4px solid #999;margin:6px 0;padding:4px 8px;white-space:pre-wrap;font-family:monospace}
.msg.user{border-color:#48c} .msg.assistant{border-color:#4a4} .msg.system{border-color:#aaa}
.tok{font-family:monospace;white-space:pre-wrap;border-radius:2px}
#tokens{line-height:1.9;border:1px solid #ddd;padding:6px}
.facts span{margin-right:1.5em}
</style></head><body>
<h1 id="title"></h1>
<div class="facts" id="facts"></div>
<h2>Learning curves</h2><div class="curves" id="curves"></div>
<h2>Trajectories</h2>
<div class="filters">
<label>step <select id="f-step"><option value="">all</option></select></label>
<label>end <select id="f-end"><option value="">all</option></select></label>
<label>environment <select id="f-env"><option value="">all</option></select></label>
<label>reward &ge; <input id="f-rmin" type="number" step="any" size="5"></label>
<label>reward &le; <input id="f-rmax" type="number" step="any" size="5"></label>
<label>tokens &ge; <input id="f-len" type="number" size="5"></label>
<span id="count"></span>
</div>
<table id="trajs"><thead><tr><th>#</th><th>step</th><th>group</th><th>sample</th><th>environment</th>
<th>reward</th><th>end</th><th>turns</th><th>tokens</th><th>trained</th></tr></thead><tbody></tbody></table>
<div id="detail" hidden>
<h2 id="d-title"></h2>
<div class="facts" id="d-facts"></div>
<p><label>colour tokens by <select id="colour">
<option value="mask">loss mask</option><option value="adv">advantage</option>
<option value="gap">sampler &minus; trainer log-prob</option><option value="stale">staleness</option>
</select></label> <span id="legend"></span></p>
<div id="tokens"></div>
<h2>Messages</h2><div id="messages"></div>
</div>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const T = D.trajectories;
const $ = (id) => document.getElementById(id);
const el = (tag, attrs, text) => { const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text; return e; };
const fmt = (x) => (x === null || x === undefined) ? "–" : (typeof x === "number" ? (+x.toFixed(4)).toString() : x);

$("title").textContent = "Run " + D.run;
const facts = [["recorded trajectories", T.length], ["left out (over the page's limit)", D.left_out],
  ["steps with metrics", D.metrics.length]];
if (D.summary) for (const k of ["steps", "stopped_by", "wall_time_s", "rl_wall_time_s", "peak_rss_gb"])
  if (k in D.summary) facts.push([k, D.summary[k]]);
if (D.summary && D.summary.cost) for (const [k, v] of Object.entries(D.summary.cost)) facts.push(["cost " + k, v]);
for (const [k, v] of facts) $("facts").appendChild(el("span", {}, k + ": " + fmt(v)));

function curve(key) {
  const pts = D.metrics.filter(m => typeof m[key] === "number").map(m => [m.step, m[key]]);
  if (pts.length === 0) return;
  const W = 320, H = 160, P = 28;
  const xs = pts.map(p => p[0]), ys = pts.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = x => P + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (W - 2 * P);
  const sy = y => H - P - (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5) * (H - 2 * P);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("data-key", key);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", pts.map(p => sx(p[0]) + "," + sy(p[1])).join(" "));
  line.setAttribute("fill", "none"); line.setAttribute("stroke", "#36c"); line.setAttribute("stroke-width", "2");
  svg.appendChild(line);
  for (const [text, x, y] of [[key, P, 14], [fmt(y1), 2, P], [fmt(y0), 2, H - P],
                              ["step " + x0, P, H - 6], ["step " + x1, W - P - 40, H - 6]]) {
    const t = document.createElementNS(ns, "text"); t.textContent = text;
    t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("font-size", "11"); svg.appendChild(t);
  }
  $("curves").appendChild(svg);
}
const keys = new Set(); for (const m of D.metrics) for (const k of Object.keys(m)) keys.add(k);
for (const k of ["generate/reward_mean", "policy/loss", "policy/grad_norm", "warmup/nll", "eval/accuracy",
                 "cost/cpu_s", "cost/cpu_s_per_solved", "cost/model_tokens"])
  curve(k);
for (const k of [...keys].filter(k => /^eval\/[^/]+\/accuracy$/.test(k)).sort()) curve(k);

function options(id, values) { for (const v of [...new Set(values)].sort((a, b) => a > b ? 1 : -1))
  $(id).appendChild(el("option", {value: v}, v)); }
options("f-step", T.map(t => t.step)); options("f-end", T.map(t => t.end));
options("f-env", T.map(t => t.env_class));

function shown() {
  const step = $("f-step").value, end = $("f-end").value, env = $("f-env").value;
  const rmin = $("f-rmin").value, rmax = $("f-rmax").value, len = $("f-len").value;
  return T.map((t, i) => [t, i]).filter(([t]) => (!step || String(t.step) === step) && (!end || t.end === end)
    && (!env || t.env_class === env) && (rmin === "" || t.reward >= +rmin) && (rmax === "" || t.reward <= +rmax)
    && (len === "" || t.response_ids.length >= +len));
}
function table() {
  const body = $("trajs").tBodies[0]; body.textContent = "";
  const rows = shown();
  $("count").textContent = rows.length + " of " + T.length;
  for (const [t, i] of rows) {
    const tr = el("tr", {class: "pick", "data-index": i});
    const trained = t.loss_mask.reduce((a, b) => a + b, 0);
    for (const v of [i, t.step, t.group_id, t.sample_index, t.env_class, t.reward, t.end, t.num_turns,
                     t.response_ids.length, trained]) tr.appendChild(el("td", {}, fmt(v)));
    tr.onclick = () => { location.hash = "traj=" + i; };
    body.appendChild(tr);
  }
}
for (const id of ["f-step", "f-end", "f-env", "f-rmin", "f-rmax", "f-len"]) $(id).oninput = table;

function values(t, mode) {  // the chosen quantity per response token (null where it has none)
  if (mode === "adv" && t.advantages) return t.advantages;
  if (mode === "gap" && t.sampler_logprobs && t.trainer_logprobs)
    return t.sampler_logprobs.map((s, k) => s - t.trainer_logprobs[k]);
  if (mode === "stale" && t.policy_versions) {
    const newest = Math.max(...t.policy_versions);
    return t.policy_versions.map(v => v >= 0 ? newest - v : null);
  }
  return t.response_ids.map(() => null);
}
function colourOf(t, k, mode, v, maxAbs) {
  if (mode === "mask") return t.loss_mask[k] ? "rgba(60,160,60,0.35)" : "rgba(150,150,150,0.15)";
  if (v === null || v === undefined || !t.loss_mask[k]) return "transparent";
  const a = Math.min(1, Math.abs(v) / maxAbs) * 0.7;
  return v >= 0 ? "rgba(40,120,220," + a + ")" : "rgba(220,60,40," + a + ")";
}
function detail(i) {
  const t = T[i]; if (!t) { $("detail").hidden = true; return; }
  $("detail").hidden = false; $("d-title").textContent = "Trajectory " + i;
  $("d-facts").textContent = "";
  for (const [k, v] of [["step", t.step], ["environment", t.env_class], ["reward", t.reward], ["end", t.end],
      ["turn rewards", (t.turn_rewards || []).map(fmt).join(", ")], ["stop", t.stop_reason],
      ["error", t.error], ["generate s", t.generate_s], ["environment s", t.env_s]])
    $("d-facts").appendChild(el("span", {}, k + ": " + fmt(v)));
  const mode = $("colour").value, perToken = values(t, mode);
  const vals = perToken.filter((v, k) => t.loss_mask[k] && v !== null && v !== undefined);
  const maxAbs = Math.max(1e-9, ...vals.map(Math.abs));
  $("legend").textContent = mode === "mask" ? "green: trained on; grey: observations (masked)"
    : (vals.length ? "blue: positive, red: negative, |max| " + fmt(maxAbs) : "not recorded for this trajectory");
  const box = $("tokens"); box.textContent = "";
  t.tokens.forEach((text, k) => {
    const s = el("span", {class: "tok", "data-k": k}, text);
    s.style.background = colourOf(t, k, mode, perToken[k], maxAbs);
    s.title = "token " + k + " id " + t.response_ids[k] + " mask " + t.loss_mask[k]
      + (t.advantages ? " adv " + fmt(t.advantages[k]) : "")
      + (t.sampler_logprobs ? " sampler " + fmt(t.sampler_logprobs[k]) : "")
      + (t.trainer_logprobs ? " trainer " + fmt(t.trainer_logprobs[k]) : "")
      + (t.policy_versions ? " version " + t.policy_versions[k] : "");
    box.appendChild(s);
  });
  const msgs = $("messages"); msgs.textContent = "";
  for (const m of t.messages) {
    const d = el("div", {class: "msg " + (m.role || "")});
    d.appendChild(el("b", {}, (m.role || "?") + ": ")); d.appendChild(document.createTextNode(m.content || ""));
    msgs.appendChild(d);
  }
}
$("colour").oninput = () => detail(current());
function current() { const m = /traj=(\d+)/.exec(location.hash); return m ? +m[1] : -1; }
window.onhashchange = () => detail(current());
table(); detail(current());
</script></body></html>
"""
