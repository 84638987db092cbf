"""Every chart is built in ``analysis/views/``: a page renders its view's charts and the report embeds the
same specs, so a chart has one home and cannot drift between the dashboard and the report."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: building an Altair chart: the import, a chart, or a composition of charts
BUILDS = re.compile(r"\bimport altair\b|\balt\.(Chart|layer|hconcat|vconcat|concat|repeat)\(")


def charts_outside_views() -> list[str]:
    """``path:line`` of every product line outside ``analysis/views/`` that builds an Altair chart."""
    files = [p for d in ("analysis", "pages", "precompute") for p in sorted((ROOT / d).rglob("*.py"))]
    out = []
    for path in files + [ROOT / "app.py"]:
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("analysis/views/"):
            continue
        out += [f"{rel}:{i}" for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if BUILDS.search(line)]
    return out


def test_no_chart_is_built_outside_the_views():
    found = charts_outside_views()
    assert not found, f"charts built outside analysis/views/ (move them into the page's view module): {found}"


def test_the_scan_sees_a_chart():
    assert BUILDS.search("    chart = alt.Chart(df).mark_line()") and BUILDS.search("import altair as alt")
    assert not BUILDS.search("st.altair_chart(views.curves_chart(data), width='stretch')")
