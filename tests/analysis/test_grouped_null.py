"""With item groups (paraphrase pairs, clips of one source) the default test shuffles whole groups as
exchangeable blocks: near-duplicates of one source never pair with each other, and alignment of the
sources themselves is called beyond chance. The within-group null (fine-grained alignment within
sources) is stored beside it and named as such. Planted data: paraphrase pairs whose sources are
strongly aligned between two spaces, each pair two near-duplicates."""

import json

import duckdb
import numpy as np
import pytest

from analysis.grid import layer_grid, prepare_layers
from analysis.metrics.knn import mutual_knn
from analysis.null import pairing_permutations, selection_null
from analysis.registry import get_metric
from analysis.storage import results as R
from analysis.studies import analyze_store
from analysis.views.heatmap import best_cell_text
from tests.helpers import quiet
from tests.stores import write_store


def _paraphrase_pairs(n_pairs=40, seed=0):
    """Two spaces of ``2 n_pairs`` items: pair g's two items are near-duplicates of one source z_g,
    and the sources are arranged alike in both spaces (a linear map of z plus noise)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n_pairs, 6))
    src = np.repeat(z, 2, axis=0)
    X = src @ rng.normal(size=(6, 12)) + 0.05 * rng.normal(size=(2 * n_pairs, 12))
    Y = src @ rng.normal(size=(6, 10)) + 0.05 * rng.normal(size=(2 * n_pairs, 10))
    return X, Y, np.repeat(np.arange(n_pairs), 2)


def test_between_group_shuffles_move_whole_groups_and_never_pair_a_group_with_itself():
    groups = np.array(["a", "a", "a", "b", "b", "x", "y", "z", "c", "c", "d", "d", "d", "e"])
    P = pairing_permutations(len(groups), 300, seed=1, groups=groups)
    assert (np.sort(P, axis=1) == np.arange(len(groups))).all()
    # every group of a size another group shares is paired, as a whole, with another such group
    for g in ("a", "b", "c", "d", "x", "y", "z", "e"):
        rows = groups[P][:, groups == g]
        assert (rows == rows[:, :1]).all() and (rows[:, 0] != g).all()
    assert P.shape == (300, len(groups)) and (P == pairing_permutations(len(groups), 300, seed=1, groups=groups)).all()
    # the within-group kind keeps each group at home
    W = pairing_permutations(len(groups), 50, seed=1, groups=groups, kind="within")
    home = np.isin(groups, ["a", "b", "c", "d"])
    assert (groups[W][:, home] == groups[home][None, :]).all()


def test_strong_alignment_of_paraphrase_sources_is_beyond_chance_by_default_and_said_apart_from_within():
    X, Y, groups = _paraphrase_pairs()
    spec = get_metric("mutual_knn")
    params = spec.resolve(k=5)
    sa, sb = prepare_layers(spec, X[None], params), prepare_layers(spec, Y[None], params)
    best = float(layer_grid(X[None], Y[None], metric="mutual_knn", k=5)[0, 0])
    assert best == pytest.approx(mutual_knn(X, Y, k=5))
    default = selection_null(spec.kernel, sa, sb, best, n_perm=100, seed=0, groups=groups)
    within = selection_null(spec.kernel, sa, sb, best, n_perm=100, seed=0, groups=groups, kind="within")
    # the planted answer: the sources align (no block shuffle reaches it); swapping a pair's two
    # near-duplicates barely changes the score, so the within-group null cannot tell
    assert default["kind"] == "between" and default["p"] == pytest.approx(1 / 101)
    assert within["kind"] == "within" and within["p"] > 0.05
    # brute force: the block shuffles' maxima by fresh mutual k-NN on re-paired rows
    perms = pairing_permutations(len(X), 100, seed=0, groups=groups)
    assert max(mutual_knn(X, Y[p], k=5) for p in perms) < best


def test_the_grids_study_stores_both_grouped_nulls_and_the_heatmap_names_them(tmp_path):
    path = tmp_path / "s.duckdb"
    write_store(path, n=30)
    con = duckdb.connect(str(path))
    for i in range(30):
        con.execute("UPDATE items SET metadata = ? WHERE idx = ?", [json.dumps({"i": i, "group": f"s{i // 2}"}), i])
    con.close()
    analyze_store(path, k=3, metrics=("mutual_knn",), n_boot=0, n_null=20, maps=0, log=quiet)
    con = duckdb.connect(str(path), read_only=True)
    (g,) = R.read_grids(con, metric="mutual_knn")
    con.close()
    assert g["flags"]["null"]["kind"] == "between" and g["flags"]["null_within"]["kind"] == "within"
    text = best_cell_text(g, "vis", "txt")
    assert "between-group shuffles (whole sources as blocks)" in text
    assert "fine-grained alignment within sources: p =" in text
    # the report's alignment table names the kind of its null and the within-group one apart
    from analysis.report import build_report, render_markdown

    con = duckdb.connect(str(path), read_only=True)
    md = render_markdown(build_report(con, store=str(path)))
    con.close()
    row = next(line for line in md.splitlines() if line.startswith("| vis (random init) | txt |"))
    assert f"({g['flags']['null']['n_perm']} between-group shuffles (whole sources as blocks))" in row
    assert f"; within sources: p = {g['flags']['null_within']['p']:.3f} (20 within-group shuffles, " in row
