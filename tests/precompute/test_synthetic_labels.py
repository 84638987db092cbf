"""The demo's generated datasets carry categorical fields at each item's top level, usable as label
tasks at the demo's small and full sizes: at least two classes, at least two items per class, no
more classes than half the items (issue #41 item 6)."""

import json
from collections import Counter

import pytest

import precompute.synthetic.scenes as synthetic
from precompute.demo import FULL, SMALL
from precompute.inputs.manifest import load_manifest
from precompute.synthetic.scenes import LABEL_FIELDS, REGIONS, write_moving_shapes, write_test_of_time

WRITERS = {"test_of_time": (write_test_of_time, "tot_items"), "moving_shapes": (write_moving_shapes, "shape_items")}


def manifest_rows(root, dataset, n, monkeypatch):
    """The rows the demo's writer writes for ``n`` items (videos not encoded: only the manifest is read)."""
    monkeypatch.setattr(synthetic, "write_video", lambda path, frames: None)
    path = WRITERS[dataset][0](root, n=n, seed=0)
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("size", [SMALL, FULL], ids=["small", "full"])
@pytest.mark.parametrize("dataset", list(LABEL_FIELDS))
def test_every_label_field_is_a_usable_task_at_the_demos_sizes(tmp_path, monkeypatch, dataset, size):
    n = getattr(size, WRITERS[dataset][1])
    rows = manifest_rows(tmp_path, dataset, n, monkeypatch)
    assert len(rows) == n
    for field in LABEL_FIELDS[dataset]:
        values = [r.get(field) for r in rows]
        assert all(isinstance(v, str) and v for v in values), (field, values[:3])
        counts = Counter(values)
        assert 2 <= len(counts) <= n // 2 and min(counts.values()) >= 2, (field, counts)


def test_the_fields_say_what_the_scene_shows(tmp_path, monkeypatch):
    for r in manifest_rows(tmp_path, "moving_shapes", 12, monkeypatch):
        assert [r[f] for f in ("shape", "colour", "direction", "speed")] == \
            [r["scene"][f] for f in ("shape", "colour", "direction", "speed")]
        assert r["captions"][0] == f"A {r['colour']} {r['shape']} moves {r['direction']}."
    for r in manifest_rows(tmp_path, "test_of_time", 12, monkeypatch):
        scene = r["scene"]
        assert r["first"] == scene["first"] and r["first_region"] == REGIONS[scene["first_region"]]
        assert scene["t_first"] < scene["t_second"]  # "first" is the circle that appears earlier


def test_the_fields_are_kept_as_item_metadata(tmp_path):
    path = write_moving_shapes(tmp_path, n=2, seed=0)
    item = load_manifest(path).items[0]
    assert {f: item.metadata[f] for f in LABEL_FIELDS["moving_shapes"]} == \
        {f: item.metadata["scene"][f] for f in LABEL_FIELDS["moving_shapes"]}
