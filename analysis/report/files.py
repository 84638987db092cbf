"""The report's three files as texts: HTML, JSON and Markdown."""

from __future__ import annotations

import json

from analysis.report.html import render_html
from analysis.report.markdown import render_markdown
from analysis.storage import results as R


def to_json(report: dict) -> str:
    """The report's numbers and provenance (charts are omitted: they are drawn from these numbers)."""
    data = {**report, "datasets": [{k: v for k, v in d.items() if k != "charts"} for d in report["datasets"]]}
    return json.dumps(R.clean_json(data), indent=2, default=str)


def render_report_files(report: dict) -> dict[str, str]:
    """``{"html", "json", "md"}`` texts of a report (no store access: render after letting go of it)."""
    return {"html": render_html(report), "json": to_json(report), "md": render_markdown(report)}
