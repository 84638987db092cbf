"""Synthetic temporal benchmarks written as real video files with precompute manifests.

- **Test of Time** (video–text alignment paper): two coloured circles appear one after the other
  in two of four regions of a black square; captions say which came first ("before"/"after") and
  where each appeared. Items come in groups of four over one pair of (colour, region) events: both
  orders, each in both phrasings, so every caption has its logical equivalent (same events, other
  phrasing) and its bag-of-words swap (same words, other order) among the items, and no two items
  share a caption. Metadata marks equivalents and swaps for the temporal probes.
- **Moving shapes**: a shape of a colour moves in a direction at a speed over a textured
  background, sometimes with a second event (a colour change, or a second shape entering), and
  ten captions that each describe a *different aspect*, so more captions carry more information.

Everything is a pure function of the seed and the sizes: the same seed gives the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .video_files import write_video

COLOURS = {
    "red": (230, 40, 40), "blue": (40, 80, 235), "green": (40, 200, 70), "yellow": (240, 220, 40),
    "white": (240, 240, 240), "purple": (160, 60, 200),
}

# ---------------------------------------------------------------- drawing helpers


def _disk(size, cy, cx, r):
    yy, xx = np.mgrid[:size, :size]
    return (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r


def _shape_mask(kind, size, cy, cx, r):
    yy, xx = np.mgrid[:size, :size]
    if kind == "circle":
        return (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
    if kind == "square":
        return (np.abs(yy - cy) <= r * 0.85) & (np.abs(xx - cx) <= r * 0.85)
    if kind == "triangle":  # apex up
        return (yy >= cy - r) & (yy <= cy + r) & (np.abs(xx - cx) <= (yy - (cy - r)) / 2)
    raise ValueError(kind)


# ---------------------------------------------------------------- Test of Time

REGIONS = ("top left", "top right", "bottom left", "bottom right")


@dataclass
class TimeScene:
    item_id: str
    first: str  # colour that appears first
    second: str
    first_region: int
    second_region: int
    phrasing: str  # "before" | "after": how the primary caption states the order
    t_first: int
    t_second: int
    n_frames: int = 30

    def _clause(self, which: str) -> str:
        colour, region = ((self.first, self.first_region) if which == "first"
                          else (self.second, self.second_region))
        return f"a {colour} circle appears in the {REGIONS[region]}"

    @property
    def caption(self) -> str:
        """"A red circle appears in the top left before a blue circle appears in the bottom right"
        (or the same events phrased with "after", second event first)."""
        if self.phrasing == "before":
            text = f"{self._clause('first')} before {self._clause('second')}"
        else:
            text = f"{self._clause('second')} after {self._clause('first')}"
        return text[0].upper() + text[1:]

    @property
    def equivalent(self) -> str:
        """Same events, the other phrasing (a logical equivalent)."""
        other = "after" if self.phrasing == "before" else "before"
        return TimeScene(**{**asdict(self), "phrasing": other}).caption

    @property
    def negative(self) -> str:
        """The events in the other order, same phrasing: a bag-of-words swap of the caption."""
        return self.swapped().caption

    def swapped(self) -> "TimeScene":
        """The same two (colour, region) events in the other order (timing and phrasing kept)."""
        return TimeScene(**{**asdict(self), "first": self.second, "second": self.first,
                            "first_region": self.second_region, "second_region": self.first_region})

    @property
    def event(self) -> str:
        """What happened, in order: ``"red@top left>blue@bottom right"`` (the phrasing aside)."""
        return f"{self.first}@{REGIONS[self.first_region]}>{self.second}@{REGIONS[self.second_region]}"


def time_scenes(n: int = 180, *, seed: int = 0, colours=tuple(COLOURS)) -> list[TimeScene]:
    """``n`` scenes in groups of four over one unordered pair of (colour, region) events, drawn
    without replacement (seeded): the events in both orders, each phrased with "before" and with
    "after" (random timing per item). All captions are distinct while
    ``n <= 4 * C(len(colours), 2) * 12`` (720 with the six colours); beyond that groups repeat."""
    if n < 0:
        raise ValueError(f"time_scenes needs n >= 0, got {n}")
    rng = np.random.default_rng(seed)
    pairs = [(a, b, r1, r2) for i, a in enumerate(colours) for b in colours[i + 1:]
             for r1 in range(4) for r2 in range(4) if r1 != r2]
    if not pairs:
        raise ValueError(f"time_scenes needs at least two colours, got {colours!r}")
    order = np.concatenate([rng.permutation(len(pairs)) for _ in range(-(-n // (4 * len(pairs))) or 1)])
    scenes = []
    for g in order[: -(-n // 4)]:
        a, b, r1, r2 = pairs[int(g)]
        for first, second, fr, sr in ((a, b, r1, r2), (b, a, r2, r1)):
            for phrasing in ("before", "after"):
                if len(scenes) == n:
                    return scenes
                t1 = int(rng.integers(3, 12))
                t2 = int(rng.integers(t1 + 6, 24))
                scenes.append(TimeScene(f"tot{len(scenes):04d}", first, second, fr, sr, phrasing, t1, t2))
    return scenes


def render_time(scene: TimeScene, size: int = 64) -> np.ndarray:
    frames = np.zeros((scene.n_frames, size, size, 3), dtype=np.uint8)
    r = size // 8
    centres = [(size // 4, size // 4), (size // 4, 3 * size // 4), (3 * size // 4, size // 4),
               (3 * size // 4, 3 * size // 4)]
    for colour, region, t in ((scene.first, scene.first_region, scene.t_first),
                              (scene.second, scene.second_region, scene.t_second)):
        mask = _disk(size, *centres[region], r)
        frames[t:, mask] = COLOURS[colour]
    return frames


# ---------------------------------------------------------------- Moving shapes

SHAPES = ("circle", "square", "triangle")
DIRECTIONS = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}
SPEEDS = {"slowly": 0.5, "quickly": 1.1}  # pixels per frame at size 64
TEXTURES = ("stripes", "dots", "a checkerboard", "plain grey")
SIZES = {"small": 0.09, "large": 0.15}  # radius as a share of the frame


@dataclass
class ShapeScene:
    item_id: str
    shape: str
    colour: str
    direction: str
    speed: str
    texture: str
    size_word: str
    start: tuple  # (y, x) as a share of the frame
    event: str | None = None  # None | "colour_change" | "second_shape"
    new_colour: str | None = None  # colour change target
    second_shape: str | None = None
    second_colour: str | None = None
    event_frame: int | None = None
    n_frames: int = 30

    def captions(self) -> list[str]:
        """Ten captions, each about a different aspect of the scene."""
        where = ("the left" if self.start[1] < 0.5 else "the right") + " half"
        edge = {"left": "left", "right": "right", "up": "top", "down": "bottom"}[self.direction]
        if self.event == "colour_change":
            ev = f"Halfway through, the {self.shape} turns {self.new_colour}."
            order = f"The {self.shape} starts {self.colour} and ends {self.new_colour}."
            count = "There is only one shape."
        elif self.event == "second_shape":
            ev = f"Later a {self.second_colour} {self.second_shape} appears."
            order = f"The {self.colour} {self.shape} is visible before the {self.second_colour} {self.second_shape}."
            count = "By the end there are two shapes."
        else:
            ev = "Nothing else happens in the clip."
            order = f"The {self.shape} stays {self.colour} the whole time."
            count = "There is only one shape."
        return [
            f"A {self.colour} {self.shape} moves {self.direction}.",
            f"The shape is a {self.shape}.",
            f"Its colour is {self.colour}.",
            f"It travels {self.direction}ward {self.speed}.",
            f"The background shows {self.texture}.",
            f"The {self.shape} is {self.size_word}.",
            f"It starts in {where} of the frame and heads toward the {edge} edge.",
            ev,
            order,
            count,
        ]

    def negative(self) -> str | None:
        """For two-event videos: the events in the other order."""
        if self.event == "colour_change":
            return f"The {self.shape} starts {self.new_colour} and ends {self.colour}."
        if self.event == "second_shape":
            return f"The {self.second_colour} {self.second_shape} is visible before the {self.colour} {self.shape}."
        return None

    def position(self, t: int, size: int) -> tuple[float, float]:
        dy, dx = DIRECTIONS[self.direction]
        step = SPEEDS[self.speed] * size / 64
        return self.start[0] * size + dy * step * t, self.start[1] * size + dx * step * t

    def colour_at(self, t: int) -> str:
        if self.event == "colour_change" and t >= self.event_frame:
            return self.new_colour
        return self.colour


def shape_scenes(n: int = 256, *, seed: int = 0) -> list[ShapeScene]:
    rng = np.random.default_rng(seed)
    colours = list(COLOURS)
    scenes = []
    for i in range(n):
        direction = str(rng.choice(list(DIRECTIONS)))
        speed = str(rng.choice(list(SPEEDS)))
        # start on the side opposite to the motion so the shape stays in frame
        travel = SPEEDS[speed] * 29 / 64
        lo, hi = 0.15, 0.85
        y, x = rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7)
        if direction == "left":
            x = rng.uniform(max(0.52, lo + travel), hi)
        elif direction == "right":
            x = rng.uniform(lo, min(0.48, hi - travel))
        elif direction == "up":
            y = rng.uniform(max(0.5, lo + travel), hi)
        else:
            y = rng.uniform(lo, min(0.5, hi - travel))
        colour = str(rng.choice(colours))
        event = [None, "colour_change", "second_shape"][i % 3]
        scene = ShapeScene(
            f"shape{i:04d}", str(rng.choice(SHAPES)), colour, direction, speed, str(rng.choice(TEXTURES)),
            str(rng.choice(list(SIZES))), (float(y), float(x)), event=event,
        )
        if event == "colour_change":
            scene.new_colour = str(rng.choice([c for c in colours if c != colour]))
            scene.event_frame = 15
        elif event == "second_shape":
            scene.second_shape = str(rng.choice(SHAPES))
            scene.second_colour = str(rng.choice([c for c in colours if c != colour]))
            scene.event_frame = int(rng.integers(10, 20))
        scenes.append(scene)
    return scenes


def _background(texture: str, size: int) -> np.ndarray:
    yy, xx = np.mgrid[:size, :size]
    if texture == "stripes":
        v = np.where((xx // 4) % 2 == 0, 70, 30)
    elif texture == "dots":
        v = np.where(((yy % 8) - 4) ** 2 + ((xx % 8) - 4) ** 2 <= 2, 80, 25)
    elif texture == "a checkerboard":
        v = np.where(((yy // 8) + (xx // 8)) % 2 == 0, 75, 30)
    else:
        v = np.full((size, size), 55)
    return np.repeat(v[:, :, None], 3, axis=2).astype(np.uint8)


def render_shapes(scene: ShapeScene, size: int = 64) -> np.ndarray:
    bg = _background(scene.texture, size)
    frames = np.repeat(bg[None], scene.n_frames, axis=0)
    r = SIZES[scene.size_word] * size
    for t in range(scene.n_frames):
        cy, cx = scene.position(t, size)
        frames[t, _shape_mask(scene.shape, size, cy, cx, r)] = COLOURS[scene.colour_at(t)]
        if scene.event == "second_shape" and t >= scene.event_frame:
            # the second shape sits still in the corner opposite the first shape's start
            sy = size * (0.2 if scene.start[0] > 0.5 else 0.8)
            sx = size * (0.2 if scene.start[1] > 0.5 else 0.8)
            frames[t, _shape_mask(scene.second_shape, size, sy, sx, SIZES["small"] * size)] = \
                COLOURS[scene.second_colour]
    return frames


# ---------------------------------------------------------------- writing datasets

#: dataset -> the categorical fields each item carries at its top level (what the video shows, except
#: Test of Time's ``phrasing``, which only the caption says): label tasks for probes
LABEL_FIELDS = {
    "test_of_time": ("first", "first_region", "phrasing"),
    "moving_shapes": ("shape", "colour", "direction", "speed"),
}


def _write(root: Path, name: str, rows: list[dict]) -> Path:
    path = root / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return path


def write_test_of_time(root, *, n: int = 180, seed: int = 0, size: int = 64) -> Path:
    """Videos and ``test_of_time.jsonl`` in ``root``; returns the manifest path."""
    root = Path(root)
    rows = []
    for s in time_scenes(n, seed=seed):
        write_video(root / "test_of_time" / f"{s.item_id}.mkv", render_time(s, size))
        rows.append({
            "id": s.item_id, "video": f"test_of_time/{s.item_id}.mkv",
            "captions": [s.caption, s.equivalent], "negatives": [s.negative],
            "event": s.event, "phrasing": s.phrasing, "first": s.first, "second": s.second,
            "first_region": REGIONS[s.first_region],
            "bow_key": " ".join(sorted(s.caption.lower().split())),
            "scene": asdict(s),
        })
    return _write(root, "test_of_time", rows)


def write_moving_shapes(root, *, n: int = 256, seed: int = 0, size: int = 64) -> Path:
    root = Path(root)
    rows = []
    for s in shape_scenes(n, seed=seed):
        write_video(root / "moving_shapes" / f"{s.item_id}.mkv", render_shapes(s, size))
        neg = s.negative()
        rows.append({
            "id": s.item_id, "video": f"moving_shapes/{s.item_id}.mkv", "captions": s.captions(),
            "negatives": [neg] if neg else [], "scene": asdict(s),
            "shape": s.shape, "colour": s.colour, "direction": s.direction, "speed": s.speed,
        })
    return _write(root, "moving_shapes", rows)
