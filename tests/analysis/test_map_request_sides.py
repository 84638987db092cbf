"""`layerscope map`: a side the model lacks is named as that side, and --text-layer (the text side of a
two-sided map) is refused with another --side rather than ignored."""

import pytest

from analysis.studies.context import DatasetRuns
from analysis.studies.embedding_map import resolve_request


def _runs(*models):
    runs = []
    for i, (model, modality) in enumerate(models):
        runs.append({"model": model, "modality": modality, "variant": "original", "run_id": f"r{i}", "n_layers": 3,
                     "n_frames": 4 if modality != "text" else None, "n_captions": 1 if modality == "text" else None})
    return DatasetRuns("toy", runs, 8)


def test_a_video_only_model_asked_for_its_text_side_says_text():
    d = _runs(("vid", "video"))
    with pytest.raises(ValueError, match="model 'vid' has no text run on dataset 'toy'; it has a video run: "
                                         "pass --side video"):
        resolve_request(d, "vid", 1, side="text")


def test_a_text_only_model_asked_for_its_video_side_says_video():
    d = _runs(("txt", "text"))
    with pytest.raises(ValueError, match="model 'txt' has no video run .* pass --side text"):
        resolve_request(d, "txt", 1, side="video")


@pytest.mark.parametrize("side", ["auto", "video", "text"])
def test_a_text_layer_without_side_both_is_refused(side):
    d = _runs(("vid", "video"))
    with pytest.raises(ValueError, match="--text-layer goes with --side both"):
        resolve_request(d, "vid", 1, side=side, text_layer=2)
