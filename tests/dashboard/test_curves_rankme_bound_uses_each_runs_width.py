"""The Curves page's sentence on RankMe's bound min(N, d) takes ``d`` from the run each curve is measured
on (``runs.dim``), not from its model's ``models.dim``: a side whose vectors have another width (a dual
encoder's caption tower wider than its vision tower, a model whose stored vectors are a narrower
projection) is compared with its own bound. The rule stays the Curves view's own: a curve is named when
its highest value at any layer is above 0.8 · N with N < d. The store is built by hand so that the
run-width rule and a models.dim rule disagree on two models in opposite directions."""

import duckdb
import numpy as np
import pandas as pd
import pytest

from analysis.storage import results as R
from analysis.views.rankme_cap import capped_curves
from analysis.views.text import md_escape
from precompute.synthetic.store import write_run
from tests.helpers import app
from tests.stores import put_analysis_version

N = 20  #: items of the dataset
SHARE = 0.8  #: the rule's margin: within 20% of the bound
BOUND = "RankMe is at most min(N, d)"

#: run id -> (model, modality, n_frames, n_captions, width of its stored vectors, RankMe curve); models.dim
#: is the width of each model's first run unless MODEL_DIMS says otherwise
RUNS = {
    # a dual encoder: vision tower 8 wide (models.dim = 8), its curve below 0.8 · N; its caption tower
    # 512 wide, drawn as its own side "dual [text]": N = 20 < 512 and 19 > 16, at the bound N
    "dv": ("dual", "video", 1, None, 8, [1.0, 3.0, 4.0, 2.0]),
    "dt": ("dual", "text", None, 2, 512, [1.0, 12.0, 19.0, 15.0]),
    # stored vectors 18 wide for a model listed as 768 wide: its bound is d = 18 < N, so 17.5 is near d,
    # which says nothing about the item count
    "rn": ("narrow", "text", None, 1, 18, [1.0, 10.0, 17.5, 16.5]),
    # run and model of one width 64 > N: named by either rule
    "rp": ("plain", "video", 2, None, 64, [1.0, 18.2, 9.0, 8.0]),
}
MODEL_DIMS = {"narrow": 768}
#: each side's largest setting: the curves drawn (a dual encoder's caption side keyed "<model> [text]")
SHOWN = {"dual": "dv", "dual [text]": "dt", "narrow": "rn", "plain": "rp"}


def named_by(width_of) -> dict:
    """``{side: highest value}`` of the drawn curves the rule names when ``d = width_of(run id)``."""
    return {model: max(RUNS[run][5]) for model, run in SHOWN.items()
            if N < width_of(run) and max(RUNS[run][5]) > SHARE * N}


def model_dim(run: str) -> int:
    """The width a models.dim rule reads: the model's listed width (its first run's unless overridden)."""
    model = RUNS[run][0]
    return MODEL_DIMS.get(model, next(r[4] for r in RUNS.values() if r[0] == model))


@pytest.fixture(scope="module")
def widths_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("widths") / "w.duckdb"
    rng = np.random.default_rng(0)
    for run_id, (model, modality, nf, nc, d, curve) in RUNS.items():
        write_run(path, run_id, rng.normal(size=(len(curve), N, d)), model=model, modality=modality,
                  n_frames=nf, n_captions=nc)
    con = duckdb.connect(str(path))
    for model, d in MODEL_DIMS.items():
        con.execute("UPDATE models SET dim = ? WHERE model = ?", [d, model])
    con.execute("UPDATE models SET random_init = false")  # write_run marks every model random
    for run_id, (model, modality, nf, nc, d, curve) in RUNS.items():
        R.put_profile(con, result_id=f"p-{run_id}", dataset="synthetic", model=model, run_id=run_id,
                      modality=modality, n_frames=nf, n_captions=nc, metric="rankme", params={},
                      layer_values=curve, flags={}, input_key="hand")
    put_analysis_version(con)
    con.close()
    return path


def test_the_store_splits_the_two_widths():
    """The case the test is about: the dual encoder's caption side is wider than N while its model is
    narrower, and the narrow model's vectors are narrower than N while its model is wider."""
    by_run = named_by(lambda run: RUNS[run][4])
    by_model = named_by(model_dim)
    assert by_run == {"dual [text]": 19.0, "plain": 18.2}
    assert by_model == {"narrow": 17.5, "plain": 18.2}


def sentence_names(note: str) -> dict:
    assert note.startswith(f"{BOUND}, here N = {N} items: ")
    named = note.split("items: ", 1)[1].split(" come within", 1)[0]
    return dict(part.rsplit(" (", 1) for part in named.split(", "))


def test_curves_section_and_page_name_each_curve_by_its_runs_width(widths_store, monkeypatch):
    from analysis.views import curves as curves_view

    expected = {m: f"{v:.1f})" for m, v in named_by(lambda run: RUNS[run][4]).items()}
    con = duckdb.connect(str(widths_store), read_only=True)
    try:
        prof = curves_view.profiles_long(con, "synthetic")
        drawn = prof.groupby("model")["run_id"].unique().map(list).to_dict()
        assert drawn == {m: [r] for m, r in SHOWN.items()}
        section = curves_view.section(con, "synthetic", metrics=("rankme",))
    finally:
        con.close()
    (note,) = [n for n in section.notes if BOUND in n]
    assert sentence_names(note) == expected
    # the page shows the section's sentence under its chart
    at = app(widths_store, monkeypatch, "curves", {"dataset": "synthetic", "metric": "rankme"})
    assert [c.value for c in at.caption if BOUND in c.value] == [md_escape(note)]


def test_capped_curves_reads_each_runs_width():
    rows = pd.DataFrame({"model": ["a"] * 3 + ["b"] * 3 + ["c"] * 3, "run_id": ["ra"] * 3 + ["rb"] * 3 + ["rc"] * 3,
                         "value": [1.0, 4.5, np.nan, 1.0, 4.5, 3.0, 1.0, 4.5, 4.0]})
    # N = 5: a's run is 8 wide (N < d, 4.5 > 4: named); b's is 4 wide (the bound is d); c's width unknown
    assert capped_curves(rows, 5, {"ra": 8, "rb": 4}, {"a": "A"}) == [("A", 4.5)]
    # a model's name is no run id: a width keyed by model is not read
    assert capped_curves(rows, 5, {"a": 8, "b": 8, "c": 8}, {}) == []
