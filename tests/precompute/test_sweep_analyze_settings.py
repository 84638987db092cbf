"""A sweep's `[analyze]` table sets every stored analysis setting the `analyze` flags set: the
neighbour search, the maps and the shuffled-pairing null too."""

import pytest

from precompute.sweep import SweepError, analyze_options, load_sweep
from tests.precompute.helpers import make_dataset, write_sweep

ANALYZE = """
[analyze]
knn = "exact"
maps = 0
null_perms = 7
null_metrics = ["mutual_knn", "cka"]
null_budgets = "all"
"""


def test_the_analyze_table_sets_knn_maps_and_the_null(tmp_path):
    make_dataset(tmp_path / "data", n=3, captions=1)
    path = write_sweep(tmp_path / "sweep.toml", manifest="data/manifest.jsonl", models=["some/model"], extra=ANALYZE)
    options = analyze_options(load_sweep(path), jobs=1)
    assert (options.knn, options.maps, options.n_null, options.null_metrics, options.null_budgets) == \
        ("exact", 0, 7, ("mutual_knn", "cka"), "all")


@pytest.mark.parametrize("line, needle", [('knn = "fast"', "analyze.knn"), ("null_perms = -1", "analyze.null_perms"),
                                          ('null_metrics = ["rankme"]', "pairwise")])
def test_a_bad_analyze_setting_points_at_its_line(tmp_path, line, needle):
    make_dataset(tmp_path / "data", n=3, captions=1)
    path = write_sweep(tmp_path / "sweep.toml", manifest="data/manifest.jsonl", models=["some/model"],
                       extra=f"[analyze]\n{line}\n")
    with pytest.raises(SweepError, match=needle):
        load_sweep(path)
