"""The embedding map's exploring tools as plain functions (issue #33): search, chart selections, the box
and its CSV, numeric metadata, the density grid and the chart's selection params. Expected values come
from loops written here (brute force), not from the functions under test."""

import io
import json

import numpy as np
import pandas as pd
import pytest

from analysis.views import embedding_tools as tools


def points(n=12, seed=0, two_sided=False):
    rng = np.random.default_rng(seed)
    caps = [f"A {('Red', 'green', 'blue')[i % 3]} ball [{i}](javascript:x)" for i in range(n)]
    df = pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(size=n), "idx": np.arange(n),
                       "item_id": [f"clip{i:02d}" for i in range(n)], "caption": caps, "series": "m · video L1",
                       "side": "video", "video": [f"/v{i}.mp4" for i in range(n)]})
    if two_sided:
        other = df.assign(x=rng.normal(size=n), y=rng.normal(size=n), series="m · text L1", side="text")
        df = pd.concat([df, other], ignore_index=True)
    return df


def test_a_long_query_is_cut_and_matches_nothing_harmful():
    assert tools.clean_query("x" * 1000) == "x" * tools.MAX_QUERY
    assert tools.clean_query("\x00red\n ") == "red"


def test_clicked_points_become_items_on_the_map_only():
    pts = points(6)
    sel = {tools.PICK: [{"idx": 3}, {"idx": "4"}, {"idx": 99}, {"idx": None}, {}, {"idx": 3}]}
    assert tools.picked_items(sel, pts) == [3, 4]
    assert tools.picked_items({}, pts) == [] and tools.picked_items(None, pts) == []


def test_a_box_from_a_selection_from_the_link_and_back():
    sel = {tools.BOX: {"x": [2.0, -1.0], "y": [0.5, 3.0]}}
    box = tools.box_from_selection(sel)
    assert box == (-1.0, 2.0, 0.5, 3.0)
    assert tools.box_from_selection({tools.BOX: {"x0": [0, 1], "y0": [1, 0]}}) == (0.0, 1.0, 0.0, 1.0)
    assert tools.box_from_selection({tools.BOX: {"x": [0, "nan"], "y": [0, 1]}}) is None
    assert tools.box_from_selection({tools.BOX: {"x": [0, 1]}}) is None
    assert tools.parse_box(tools.box_param(box)) == (box, None)
    assert tools.parse_box(None) == (None, None)
    for bad in ["1,2,3", "a,b,c,d", "1,2,3,inf", "[x](javascript:alert(1))"]:
        value, message = tools.parse_box(bad)
        assert value is None and "not four numbers" in message


def test_the_box_url_text_keeps_every_point_inside():
    pts = points(50, seed=3)
    box = (pts["x"].min(), pts["x"].max(), pts["y"].min(), pts["y"].max())  # points on every edge
    again, _ = tools.parse_box(tools.box_param(box))
    assert len(tools.points_in_box(pts, again)) == 50


def item_records(pts):
    """The items behind ``points``: two captions each (the map shows the first), metadata with a list."""
    rows = pts.drop_duplicates("idx").sort_values("idx")
    return pd.DataFrame({"idx": rows["idx"], "item_id": rows["item_id"],
                         "captions": [[c, "a second caption, " * 20 + f"end {i}"] for i, c in zip(rows["idx"],
                                                                                                  rows["caption"])],
                         "metadata": [{"shape": "cube" if i % 2 else "disc", "tags": f"t{i}, toy",
                                       **({"x": "clash"} if i == 0 else {})} for i in rows["idx"]]})


def test_the_exported_csv_holds_exactly_the_points_in_the_box_with_every_caption_and_field():
    pts = points(40, seed=1, two_sided=True).assign(run_id=lambda d: d["side"] + "-run", layer=1)
    recs = item_records(pts)
    box = (-0.5, 0.7, -1.0, 0.4)
    want = [r for r in pts.itertuples() if box[0] <= r.x <= box[1] and box[2] <= r.y <= box[3]]
    assert 0 < len(want) < len(pts)
    back = pd.read_csv(io.BytesIO(tools.selection_csv(tools.points_in_box(pts, box), recs)), keep_default_na=False)
    assert list(back.columns)[:8] == ["item_id", "series", "run_id", "layer", "x", "y", "caption_1", "caption_2"]
    assert sorted(zip(back["item_id"], back["series"], back["run_id"])) == sorted(
        (r.item_id, r.series, f"{r.side}-run") for r in want)
    info = recs.set_index("item_id")
    for row in back.itertuples():
        caps = info.at[row.item_id, "captions"]
        assert (row.caption_1, row.caption_2) == (caps[0], caps[1])  # whole, Markdown exported as text
        assert row.shape == info.at[row.item_id, "metadata"]["shape"]
        assert row.tags == info.at[row.item_id, "metadata"]["tags"]
    assert tools.points_in_box(pts, None).empty


def test_a_metadata_field_named_like_a_column_keeps_both():
    pts = points(3).assign(run_id="r", layer=2)
    recs = item_records(pts)
    back = pd.read_csv(io.BytesIO(tools.selection_csv(pts, recs)), keep_default_na=False)
    assert list(back["x"]) == pytest.approx(list(pts["x"]))
    assert list(back["metadata_x"]) == ["clash", "", ""]


def test_numeric_metadata_keeps_number_fields_only():
    md = [{"speed": 0.5 * i, "lane": i % 2, "flag": bool(i % 2), "name": f"n{i}", "same": 1,
           "scene": {"size": i * 2}, "_private": i, "mixed": i if i else "x"} for i in range(5)]
    md[2].pop("speed")  # a missing value is NaN, the field stays numeric
    df = tools.numeric_metadata(md)
    assert list(df.columns) == ["lane", "scene_size", "speed"]
    assert np.isnan(df.loc[2, "speed"]) and df.loc[4, "speed"] == 2.0
    assert list(df["scene_size"]) == [0, 2, 4, 6, 8]
    assert tools.numeric_metadata([{}, {}]).shape == (2, 0)


def brute_counts(x, y, ex, ey):
    """Each point's cell by comparison: half-open cells, the last closed (numpy.histogram2d's rule)."""
    counts = {}
    for a, b in zip(x, y):
        i = min(int(np.searchsorted(ex, a, side="right")) - 1, len(ex) - 2)
        j = min(int(np.searchsorted(ey, b, side="right")) - 1, len(ey) - 2)
        counts[(i, j)] = counts.get((i, j), 0) + 1
    return counts


@pytest.mark.parametrize("case", ["normal", "duplicates", "flat", "one"])
def test_density_cells_count_every_point_once(case):
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=300), rng.normal(size=300)
    if case == "duplicates":
        x[:100], y[:100] = x[0], y[0]
    if case == "flat":
        x[:] = 2.0  # a collapsed axis
    if case == "one":
        x, y = x[:1], y[:1]
    pts = pd.DataFrame({"x": x, "y": y})
    cells = tools.density_cells(pts, bins=8)
    assert cells["count"].sum() == len(x)
    lo_x, hi_x = (x.min(), x.max()) if x.max() > x.min() else (x.min() - 0.5, x.max() + 0.5)
    lo_y, hi_y = (y.min(), y.max()) if y.max() > y.min() else (y.min() - 0.5, y.max() + 0.5)
    ex, ey = np.linspace(lo_x, hi_x, 9), np.linspace(lo_y, hi_y, 9)
    want = brute_counts(x, y, ex, ey)
    got = {(int(np.argmin(abs(ex - r.x0))), int(np.argmin(abs(ey - r.y0)))): r.count for r in cells.itertuples()}
    assert got == want
    if case == "duplicates":
        assert cells["count"].max() >= 100


def test_density_bins_give_about_four_points_per_cell_within_bounds():
    assert [tools.density_bins(n) for n in (0, 30, 400, 4 * 30 ** 2, 10 ** 6)] == [5, 5, 10, 30, tools.DENSITY_BINS]


def test_density_is_used_above_the_threshold_or_on_request():
    assert not tools.use_density(tools.DENSITY_THRESHOLD, False)
    assert tools.use_density(tools.DENSITY_THRESHOLD + 1, False)
    assert tools.use_density(10, True)


def layers(chart):
    spec = chart.to_dict()
    return spec, spec.get("layer", [spec])


def test_the_chart_carries_named_click_and_box_selections_and_rings():
    pts = points(10)
    spec, marks = layers(tools.explore_chart(pts, highlight=[1, 2], focus=[5, 6, 7], box=(0, 1, 0, 1)))
    names = {p["name"]: p["select"]["type"] for p in spec.get("params", [])
             + [p for m in marks for p in m.get("params", [])]}
    assert names == {tools.PICK: "point", tools.BOX: "interval"}
    rings = [m for m in marks if m["mark"].get("filled") is False]
    assert [(m["mark"]["color"], m["mark"]["size"]) for m in rings] == [("black", 220), ("#d62728", 220),
                                                                          ("#d62728", 480)]
    assert marks[-1]["mark"]["type"] == "rect" and marks[-1]["mark"]["strokeDash"]


def test_a_numeric_field_gets_a_continuous_scale_and_a_category_a_nominal_one():
    pts = points(10).assign(speed=np.linspace(0, 1, 10), shade=list("ab" * 5))
    _, marks = layers(tools.explore_chart(pts, colour="speed", kind="quantitative"))
    assert marks[0]["encoding"]["color"]["type"] == "quantitative"
    _, marks = layers(tools.explore_chart(pts, colour="shade", kind="nominal"))
    assert marks[0]["encoding"]["color"]["type"] == "nominal"


def test_the_density_view_draws_counts_not_points():
    pts = points(200, seed=2)
    spec, marks = layers(tools.explore_chart(pts, density=True, highlight=[0]))
    assert marks[0]["mark"]["type"] == "rect" and marks[0]["encoding"]["color"]["field"] == "count"
    data = spec["datasets"][marks[0]["data"]["name"]]
    assert sum(r["count"] for r in data) == 200
    assert not any(m["mark"].get("type") == "point" and m["mark"].get("filled") for m in marks)
    assert json.dumps(spec)  # serialisable as the page sends it
