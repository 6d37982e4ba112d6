"""The demo's HTML report: what happened, in numbers and plots (the simulator's inline SVG charts).

Self-contained (no scripts, nothing fetched). It shows the rule by its Secret reference; no secret is in it.
"""

from __future__ import annotations

import html
from pathlib import Path

import yaml

from controller.demo.record import DemoRecord, demo_rule_document
from controller.model.textfmt import duration, plural
from controller.simulator.report import line_chart

QUEUE, DESIRED, READY, PROCESSED, SENT = "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#7f7f7f"


def _cell(value: object) -> str:
    return "-" if value is None else html.escape(str(value))


def _since(value: object) -> str:
    """A time since the rule started, `+1m5s`, in the style of every duration the commands print."""
    return f"+{duration(round(value, 1))}" if isinstance(value, int | float) else _cell(value)


def render(record: DemoRecord) -> str:
    samples = record.samples
    ts = [s.t for s in samples]
    queue = line_chart(
        "Queue: approximate message count, as the rule polled it",
        [("approximate count", QUEUE, ts, [float(s.count or 0) for s in samples])],
        x_label="seconds since the rule started", y_label="messages", x_unit_seconds=1.0,
    )
    workers = line_chart(
        "Workers: asked for and ready",
        [("desired", DESIRED, ts, [float(s.desired or 0) for s in samples]),
         ("ready", READY, ts, [float(s.ready or 0) for s in samples])],
        x_label="seconds since the rule started", y_label="worker processes", step=True, x_unit_seconds=1.0,
    )
    work = line_chart(
        "Messages: sent and processed (cumulative)",
        [("sent", SENT, ts, [float(s.sent) for s in samples]),
         ("processed", PROCESSED, ts, [float(s.processed) for s in samples])],
        x_label="seconds since the rule started", y_label="messages", x_unit_seconds=1.0,
    )
    facts = record.facts()
    fact_rows = "".join(
        f"<tr><th>{html.escape(key.replace('_', ' '))}</th><td>{_cell(value)}</td></tr>"
        for key, value in facts.items() if key != "bursts"
    )
    bursts = ", ".join(f"{plural(messages, 'message')} at +{duration(round(at, 1))}" for at, messages in record.bursts)
    decisions = "".join(
        f"<tr><td>{_since(s.t)}</td><td>{_cell(s.count)}</td><td>{s.scaled_from} &rarr; {s.scaled_to}</td>"
        f"<td>{html.escape(s.reason)}</td><td class=msg>{html.escape(s.message)}</td></tr>"
        for s in record.scale_events
    )
    processes = "".join(
        f"<tr><td>{p['replica']}</td><td>{p['pid']}</td><td>{_since(p['started'])}</td><td>{_since(p['stopped'])}</td>"
        f"<td>{_cell(p['exit_code'])}</td><td>{'yes' if p['killed'] else 'no'}</td></tr>"
        for p in record.processes
    )
    options = record.options
    rule_yaml = yaml.safe_dump(demo_rule_document(options), sort_keys=False)
    title = "queuescale demo"
    outcome = {
        "settled": "The bursts drained and the workers scaled back to zero.",
        "timeout": f"The demo stopped after {duration(options.max_duration)} before it settled.",
        "interrupted": "The demo was interrupted.",
    }.get(record.outcome, record.outcome)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 960px; }}
h1 {{ font-size: 22px; }} p.facts {{ color: #555; }}
table {{ border-collapse: collapse; margin: 12px 0 24px; font-size: 13px; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: right; }}
th {{ text-align: left; font-weight: normal; }} td.msg {{ text-align: left; }}
pre {{ background: #f6f6f6; padding: 10px; font-size: 12px; }}
svg {{ display: block; margin: 8px 0 20px; }}
</style></head><body>
<h1>{title}</h1>
<p>A real Azure Storage queue (Azurite on 127.0.0.1), real worker processes that receive, work on
({duration(options.work_time)} each) and delete messages, and the operator's own reconciler and policy scaling them from
the queue's count. Bursts: {html.escape(bursts) or "none sent"}. {html.escape(outcome)}</p>
<p class="facts">{html.escape(record.failure)}</p>
<h2>What happened</h2>
<table><tbody>{fact_rows}</tbody></table>
{queue}
{workers}
{work}
<h2>Every scale, with the policy's reason</h2>
<table><thead><tr><th>when</th><th>count</th><th>workers</th><th>reason</th><th>message</th></tr></thead>
<tbody>{decisions}</tbody></table>
<h2>Worker processes</h2>
<p>Stopped newest first: SIGTERM lets a worker finish the message it holds; SIGKILL only after the grace period
({duration(options.work_time + 5)}). Times are since the rule started.</p>
<table><thead><tr><th>replica</th><th>pid</th><th>started</th><th>stopped</th><th>exit code</th><th>killed</th></tr>
</thead><tbody>{processes}</tbody></table>
<h2>The rule</h2>
<pre>{html.escape(rule_yaml)}</pre>
</body></html>
"""


def write_report(path: Path, record: DemoRecord) -> None:
    path.write_text(render(record), encoding="utf-8")
