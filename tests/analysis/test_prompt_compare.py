"""TARA's EOL-prompt against plain-prompt comparison (issue #31): one MLLM under two prompts, on a
store with planted modality gaps (tests.stores.write_prompt_store); every number checked against its
formula computed here: gap = ||mean(x̂) − mean(ŷ)|| of unit rows, uniformity = log mean_{i≠j}
exp(−2||x̂_i − x̂_j||²), recall@1 by brute-force argmax of cosines."""

import duckdb
import numpy as np
import pytest

from analysis.methods.paper_figures import side_by_side
from analysis.views import prompt_compare as PC
from tests.stores import write_prompt_store


def _unit(X):
    X = np.asarray(X, dtype=np.float64)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def gap(V, T):
    return float(np.linalg.norm(_unit(V).mean(0) - _unit(T).mean(0)))


def uniformity(X):
    U = _unit(X)
    n = len(U)
    vals = [np.exp(-2 * np.sum((U[i] - U[j]) ** 2)) for i in range(n) for j in range(n) if i != j]
    return float(np.log(np.mean(vals)))


def recall1_t2v(V, T):
    S = _unit(T) @ _unit(V).T
    return float(np.mean(np.argmax(S, axis=1) == np.arange(len(T))))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "s.duckdb"
    P = write_prompt_store(path)
    con = duckdb.connect(str(path), read_only=True)
    yield con, P
    con.close()


def test_the_two_prompts_of_one_model_are_proposed_as_a_pair(store):
    con, _ = store
    assert PC.prompt_models(con, "prompts") == ["eol", "plain"]
    assert PC.prompt_pairs(con, "prompts") == [("eol", "plain")]


def test_the_table_holds_each_metric_from_its_formula(store):
    con, P = store
    cv = PC.compare_view(con, "prompts", "eol", "plain")
    assert cv["error"] is None
    t = cv["table"].set_index("metric")
    (Va, Ta), (Vb, Tb) = P["eol"], P["plain"]
    ga, gb = gap(Va[2], Ta[2]), gap(Vb[2], Tb[2])
    assert t.at["modality_gap", "A"] == pytest.approx(ga, abs=1e-6)
    assert t.at["modality_gap", "B"] == pytest.approx(gb, abs=1e-6)
    assert t.at["modality_gap", "B − A"] == pytest.approx(gb - ga, abs=1e-6)
    assert ga < gb and t.at["modality_gap", "better"] == "A"  # the planted smaller gap wins
    assert t.at["modality_gap", "intervals apart"] == "yes" and t.at["modality_gap", "A interval"].startswith("[")
    assert t.at["recall@1_t2v", "A"] == pytest.approx(recall1_t2v(Va[2], Ta[2]))
    assert t.at["recall@1_t2v", "B"] == pytest.approx(recall1_t2v(Vb[2], Tb[2]))
    assert t.at["uniformity (video)", "A"] == pytest.approx(uniformity(Va[2]), abs=1e-6)
    assert t.at["uniformity (text)", "B"] == pytest.approx(uniformity(Tb[2]), abs=1e-6)
    assert cv["prompts"] == {"eol": "{text}: Summarize above sentence in one word: ", "plain": "{text}"}
    # the chart's per-layer gaps: every layer of both
    layers = cv["layers"].set_index(["model", "layer"])["value"]
    for model, (V, T) in P.items():
        for la in range(3):
            assert layers[(model, la)] == pytest.approx(gap(V[la], T[la]), abs=1e-6)
    assert f"eol {ga:.3f}, plain {gb:.3f}" in PC.compare_text(cv)
    PC.compare_chart(cv).to_dict()


def test_missing_or_equal_models_say_why(store):
    con, _ = store
    assert "no same-space result of nope" in PC.compare_view(con, "prompts", "eol", "nope")["error"]
    assert "two different models" in PC.compare_view(con, "prompts", "eol", "eol")["error"]


def test_side_by_side_by_hand():
    # lower is better: b (0.3) beats a (0.8); intervals [0.7, 0.9] and [0.2, 0.4] are disjoint
    r = side_by_side(0.8, 0.3, higher_is_better=False, ci_a=[0.7, 0.9], ci_b=[0.2, 0.4])
    assert r == {"delta": pytest.approx(-0.5), "better": "b", "separated": True}
    r = side_by_side(0.5, 0.6, higher_is_better=True, ci_a=[0.4, 0.62], ci_b=[0.55, 0.7])
    assert r["better"] == "b" and r["separated"] is False
    assert side_by_side(0.5, 0.5, higher_is_better=True)["better"] == "tie"
    assert side_by_side(None, 0.5, higher_is_better=True) == {"delta": None, "better": None, "separated": None}
    assert side_by_side(0.1, 0.2, higher_is_better=True, ci_a=[None, None], ci_b=[0.1, 0.3])["separated"] is None


def test_one_mllm_under_two_names_pairs_each_name_with_itself_only(tmp_path):
    from analysis.studies import analyze_store

    path = tmp_path / "s.duckdb"
    write_prompt_store(path)
    out = analyze_store(path, log=lambda m: None)  # the stored settings; everything reused
    assert not [n for n in out["notes"] if "no shared space" in n]
    con = duckdb.connect(str(path), read_only=True)
    subjects = {r[0] for r in con.execute("SELECT DISTINCT subject FROM result_studies WHERE study = 'same_space'").fetchall()}
    con.close()
    assert subjects == {"eol|eol", "plain|plain"}
