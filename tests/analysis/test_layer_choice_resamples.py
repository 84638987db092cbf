"""The layer-choice study scores each curve on the item resamples a verdict needs (its pick, the
last layer, the ``default`` output), on the one draw the grids' best-cell intervals use, so the
verdict's gains are paired differences; on a planted shared latent the verdict finds the layer
(issue #29, item 3)."""

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from analysis.views.verdicts import verdicts
from analysis.bootstrap import bootstrap_ci, resample_indices
from analysis.studies import analyze_store
from precompute.synthetic.store import write_run

N, D, B = 40, 12, 30


def quiet(_msg):
    pass


def _rankme(Z):
    """RankMe from its definition (Garrido et al. 2023): σ of Z uncentred, p = σ/‖σ‖₁ + 1e-7, exp(−Σ p log p)."""
    s = np.linalg.svd(np.asarray(Z, dtype=np.float64), compute_uv=False)
    p = s / s.sum() + 1e-7
    return float(np.exp(-(p * np.log(p)).sum()))


@pytest.fixture
def planted(tmp_path):
    """``vid``: layers 0, 1 and 3 are independent rank-2 noise; layer 2 shares a 6-d latent with
    every layer of ``txt``: alignment, RankMe and uniformity all pick layer 2."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(N, 6))
    noise = [rng.normal(size=(N, 2)) @ rng.normal(size=(2, D)) + 0.05 * rng.normal(size=(N, D)) for _ in range(4)]
    V = np.stack(noise[:2] + [z @ rng.normal(size=(6, D)) + 0.3 * rng.normal(size=(N, D))] + noise[3:])
    T = np.stack([z @ rng.normal(size=(6, D)) + 0.3 * rng.normal(size=(N, D)) for _ in range(2)])
    path = tmp_path / "p.duckdb"
    write_run(path, "v", V.astype(np.float32), model="vid", modality="video", n_frames=1)
    write_run(path, "t", T.astype(np.float32), model="txt", modality="text", n_captions=1)
    analyze_store(path, metrics=("mutual_knn",), n_boot=B, k=5, seed=0, log=quiet)
    return path, V.astype(np.float32), T.astype(np.float32)


def _payload(path, subject):
    con = duckdb.connect(str(path), read_only=True)
    (c,) = R.read_studies(con, study="layer_choice", subject=subject)
    con.close()
    return c["payload"]


def test_resamples_are_stored_at_each_curves_pick_and_the_last_layer_on_one_draw(planted):
    path, V, T = planted
    p = _payload(path, "vid")
    res = p["resamples"]
    assert p["n_boot"] == B and p["resample_seed"] == 0
    assert set(res["rankme"]) == {"2", "3"} and set(res["alignment with txt"]) == {"2", "3"}
    # RankMe on each resample, from its definition on the explicit resample indices
    IX = resample_indices(N, B, np.random.default_rng(0))
    for layer in (2, 3):
        want = [_rankme(V[layer][ix]) for ix in IX]
        assert res["rankme"][str(layer)] == pytest.approx(want, rel=1e-9)
    # alignment at layer 2 is the grid's row maximum there: its cell's resamples are the ones the
    # grid's best-cell interval draws (same seed, same cell)
    con = duckdb.connect(str(path), read_only=True)
    (g,) = R.read_grids(con, run_a="v", metric="mutual_knn")
    con.close()
    j = int(np.nanargmax(np.asarray(g["grid"])[2]))
    ci = bootstrap_ci("mutual_knn", V[2], T[j], n_boot=B, seed=0, k=5)
    assert res["alignment with txt"]["2"] == pytest.approx(list(ci.samples))


def test_the_verdict_finds_the_planted_layer_with_paired_gains(planted):
    path, V, T = planted
    con = duckdb.connect(str(path))
    con.execute("UPDATE models SET random_init = false")  # trained models here, so their signals vote
    con.close()
    analyze_store(path, log=quiet)  # verdicts are decided by analyze: again, now that the models are trained
    con = duckdb.connect(str(path), read_only=True)
    by = {v["model"]: v for v in verdicts(con, "synthetic")}
    con.close()
    v = by["vid"]["verdict"]
    assert v.status == "recommend" and v.layer == 2 and v.n_agree == v.n_metrics == 3
    assert v.vs_last["low"] > 0 and v.vs_last["gain"] >= v.margin
    # the lead's paired interval from the stored resamples, recomputed here
    s = _payload(path, "vid")["resamples"][v.lead]
    sign = 1 if v.lead != "uniformity" else -1
    d = sign * (np.array(s["2"]) - np.array(s["3"]))
    est = sign * (v.value - v.last_value)
    assert v.vs_last["low"] == pytest.approx(np.percentile(d, 2.5) + est - np.median(d))
    assert "use layer 2 of 0–3 — 3 of 3 metrics agree" in by["vid"]["sentence"]


def test_with_random_init_models_every_line_is_a_control(planted):
    path, _, _ = planted
    con = duckdb.connect(str(path), read_only=True)
    found = verdicts(con, "synthetic")
    con.close()
    for v in found:
        assert v["verdict"].status in ("control", "none") and "use layer" not in v["sentence"]
        assert v["verdict"].n_metrics <= 2  # alignment with the other (random) model never votes
    # the stored agreement does not count the control either
    p = _payload(path, "vid")
    assert p["controls"] == ["alignment with txt"] and p["agreement"]["n_metrics"] == 2
    assert p["picks"]["alignment with txt"]["layer"] == 2  # still picked and shown


def test_a_collapsed_last_layer_is_never_a_baseline_and_the_line_says_why(tmp_path):
    rng = np.random.default_rng(2)
    z = rng.normal(size=(N, 6))
    V = np.stack([z @ rng.normal(size=(6, D)) + 0.3 * rng.normal(size=(N, D)) for _ in range(4)])
    V[3] = V[3][0]  # every item at one point: nothing to compare against
    T = np.stack([z @ rng.normal(size=(6, D)) + 0.3 * rng.normal(size=(N, D)) for _ in range(2)])
    path = tmp_path / "c.duckdb"
    write_run(path, "v", V.astype(np.float32), model="vid", modality="video", n_frames=1)
    write_run(path, "t", T.astype(np.float32), model="txt", modality="text", n_captions=1)
    analyze_store(path, metrics=("mutual_knn",), n_boot=B, k=5, seed=0, log=quiet)
    p = _payload(path, "vid")
    assert all("3" not in per for per in p["resamples"].values())  # no value there, so no resamples
    con = duckdb.connect(str(path))
    con.execute("UPDATE models SET random_init = false")
    con.close()
    analyze_store(path, log=quiet)
    con = duckdb.connect(str(path), read_only=True)
    (v,) = [v for v in verdicts(con, "synthetic") if v["model"] == "vid"]
    con.close()
    assert v["verdict"].layer != 3 and v["verdict"].vs_last is None
    assert "no gain over the last layer: it is degenerate or undefined" in v["sentence"]
