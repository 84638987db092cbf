"""Layer-selection reports: which layer of which model to use, and why, as one shareable file.

:func:`build_report` gathers numbers from the result tables (nothing is recomputed) and the pages'
charts (:mod:`analysis.report.build`); :func:`render_html` writes one self-contained HTML file
(:mod:`analysis.report.html`), :func:`render_markdown` a short summary for pasting
(:mod:`analysis.report.markdown`), and :func:`to_json` the report dict itself, charts left out.
"""

from __future__ import annotations

from analysis.report.build import build_report, report_data  # noqa: F401
from analysis.report.files import render_report_files, to_json  # noqa: F401
from analysis.report.html import render_html  # noqa: F401
from analysis.report.markdown import render_markdown  # noqa: F401
from analysis.views.scaling import scaling_entry  # noqa: F401
from analysis.report.text import SECTIONS, alignment_heading, reorder_report_rows, scaling_rows  # noqa: F401
