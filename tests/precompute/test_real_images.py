"""Real labelled images written as image items: scikit-learn's digits (class fields, stratified
subsets) and scikit-image's bundled photos (issue #41 item 5)."""

import json
from collections import Counter

import numpy as np
import pytest
from PIL import Image

from precompute.inputs.manifest import load_manifest
from precompute.synthetic.packaged import DIGIT_WORDS, digit_subset, write_digits, write_photos


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_digits_items_carry_their_class_caption_and_pixels(tmp_path):
    from sklearn.datasets import load_digits

    digits = load_digits()
    manifest = write_digits(tmp_path, n=40, size=32)
    items = rows(manifest)
    assert len(items) == 40
    for r in items:
        i = int(r["id"][len("digit"):])
        label = int(digits.target[i])
        assert r["digit"] == str(label) and r["parity"] == ("even" if label % 2 == 0 else "odd")
        assert r["captions"] == [f"a handwritten digit {DIGIT_WORDS[label]}"]
        img = np.asarray(Image.open(tmp_path / r["video"]))
        assert img.shape == (32, 32, 3) and (img[..., 0] == img[..., 1]).all()
        # ink dark on white: the 8x8 image's darkest cell is where its ink is largest
        small = np.asarray(Image.fromarray(img[..., 0]).resize((8, 8), Image.Resampling.BOX)).astype(float)
        assert np.corrcoef(small.ravel(), -digits.images[i].ravel())[0, 1] > 0.9
    assert load_manifest(manifest).items[0].metadata["digit"] == items[0]["digit"]  # kept as metadata


def test_a_digits_subset_is_stratified_seeded_and_keeps_ids():
    from sklearn.datasets import load_digits

    y = load_digits().target
    keep = digit_subset(y, 200, seed=0)
    assert len(keep) == 200 == len(set(keep.tolist())) and (np.diff(keep) > 0).all()
    share = Counter(y.tolist())
    for c, k in Counter(y[keep].tolist()).items():  # each class within one item of its share of 200
        assert abs(k - 200 * share[c] / len(y)) <= 1
    assert (digit_subset(y, 200, seed=0) == keep).all() and not (digit_subset(y, 200, seed=1) == keep).all()
    assert len(digit_subset(y, None)) == len(y) == 1797


@pytest.mark.parametrize("n", [5, 1798])
def test_a_digits_subset_outside_what_stratifies_is_refused(n):
    from sklearn.datasets import load_digits

    with pytest.raises(ValueError, match=f"write_digits: n={n} must be between 10 .* and 1797"):
        digit_subset(load_digits().target, n)


def test_the_chelsea_photo_is_written_as_an_image_item(tmp_path):
    from skimage import data

    manifest = write_photos(tmp_path, names=("chelsea", "coffee"))
    items = rows(manifest)
    assert [(r["id"], r["subject"]) for r in items] == [("chelsea", "cat"), ("coffee", "coffee")]
    assert (np.asarray(Image.open(tmp_path / items[0]["video"])) == data.chelsea()).all()  # PNG is lossless
    assert len(load_manifest(manifest).items) == 2
    with pytest.raises(ValueError, match="no bundled photo 'moon'"):
        write_photos(tmp_path, names=("moon",))
