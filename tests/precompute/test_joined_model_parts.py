"""A model shipped as one zip split over several packages is joined and extracted once into a cache
folder (:func:`precompute.synthetic.packaged.join_split_zip`, used by ``mpnet_path``; issue #41 item 5)."""

import io
import json
import zipfile

import pytest

from precompute.synthetic.packaged import join_split_zip


def split_zip(tmp_path, files: dict, n: int = 3) -> list:
    """A zip of ``files`` cut into ``n`` consecutive byte ranges, written as ``m.zip.001`` ..."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    raw = buf.getvalue()
    cuts = [len(raw) * i // n for i in range(n + 1)]
    parts = []
    for i in range(n):
        p = tmp_path / f"m.zip.{i + 1:03d}"
        p.write_bytes(raw[cuts[i]:cuts[i + 1]])
        parts.append(p)
    return parts


MODULES = json.dumps([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
                      {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                      {"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])


def test_parts_join_into_the_folder_once(tmp_path):
    parts = split_zip(tmp_path, {"m/modules.json": MODULES, "m/config.json": "{}", "m/desktop.ini": "x",
                                 "m/1_Pooling/config.json": '{"pooling_mode_mean_tokens": true}',
                                 "m/1_Pooling/desktop.ini": "x", "m/weights.bin": bytes(range(256)) * 50})
    out = join_split_zip(parts, tmp_path / "cache", "m")
    assert (out / "weights.bin").read_bytes() == bytes(range(256)) * 50
    assert (out / "2_Normalize").is_dir()  # named by modules.json, absent from the zip
    assert not list(out.rglob("desktop.ini"))
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [out.parent.name]  # no work folder left
    for p in parts:  # the second call reads nothing: the parts may even be gone
        p.write_bytes(b"x" * p.stat().st_size)
    assert join_split_zip(parts, tmp_path / "cache", "m") == out


def test_parts_out_of_order_are_refused_and_leave_nothing(tmp_path):
    parts = split_zip(tmp_path, {"m/modules.json": MODULES, "m/w.bin": bytes(1000)})
    with pytest.raises(ValueError, match="m: its 3 parts do not join into a sound zip file"):
        join_split_zip(parts[::-1], tmp_path / "cache", "m")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_zip_without_the_models_folder_is_refused(tmp_path):
    parts = split_zip(tmp_path, {"other/modules.json": MODULES})
    with pytest.raises(ValueError, match="m: the joined zip holds no m/modules.json"):
        join_split_zip(parts, tmp_path / "cache", "m")
