"""`sweep plan` refuses a vision model on a text-only manifest, pointing at the model's line, as
`sweep run` would refuse it (before: the plan passed and the run failed without a line)."""

import json

from precompute.cli import main
from tests.precompute.helpers import write_sweep


def test_a_vision_model_on_a_text_only_manifest_fails_the_plan_at_its_line(tmp_path, capsys):
    from precompute.synthetic import tiny_models

    tiny_models.build_vit(tmp_path / "vit")
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"id": f"s{i}", "captions": [f"a dog {i}"]}) + "\n"
                                              for i in range(4)))
    path = write_sweep(tmp_path / "sweep.toml", manifest="t.jsonl", models=[str(tmp_path / "vit")])
    line = next(i + 1 for i, text in enumerate(path.read_text().splitlines()) if text == "[[models]]")
    store = tmp_path / "s.duckdb"
    assert main(["sweep", "plan", str(path), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert f"sweep.toml:{line}" in err and "has no videos (a text-only dataset)" in err
    assert not store.exists()
