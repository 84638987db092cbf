"""``layerscope analyze``: every study over everything in the store, cached as result tables.

Studies per dataset (payloads are JSON in ``result_studies`` unless said otherwise):
- grids (``result_grids``): every vision×text pair of done runs at every (n_f, n_c), and every
  vision×vision pair at each shared n_f; best cell and a bootstrap interval for it.
- profiles (``result_profiles``): RankMe, LID (MLE), uniformity per layer for every run.
- ``scaling``: per vision×text model pair and metric, the best-cell score over the (n_f, n_c) grid,
  the saturating law's fit, held-out errors, parameter intervals and the other forms.
- ``model_map``: best-layer mutual k-NN between every two models, clustering, 2-D map.
- ``downstream``: correlations between label-free scores and imported downstream results.
- ``temporal``: Test of Time at k=1,2,3 with first-neighbour types, reorder negatives, arrow of
  time, chiral retrieval where models share a space.
- ``layer_choice``: per model, the layer each label-free metric recommends and their agreement.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np

from . import results as R
from .bootstrap import bootstrap_ci
from .downstream import correlate, depth_curve
from .grid import best_cell, layer_grid, layer_profile
from .layer_selection import recommend_layers
from .model_map import model_map
from .registry import get_metric
from .scaling import TooFewPoints, bootstrap_params, compare_forms, fit_scaling_law
from .schema import create_all
from .store import StoreError, connect, load_run
from .temporal import arrow_of_time, chiral_accuracy, first_neighbour_types, reorder_alignment

ANALYSIS_VERSION = 3  # bump when a result payload changes shape
PROFILE_METRICS = ("rankme", "lid", "uniformity")
VISION = ("video", "image")


class Analysis:
    def __init__(self, con, *, k=10, metrics=("mutual_knn", "cka", "cknna"), references=None, n_boot=200,
                 seed=0, log=print):
        self.con = con
        self.k = k
        self.metrics = list(metrics)
        for m in self.metrics:
            if get_metric(m).kind != "pairwise":
                raise ValueError(f"analyze grids take pairwise metrics; {m!r} is {get_metric(m).kind}")
        self.references = list(references or [])
        self.n_boot = int(n_boot)
        self.seed = seed
        self.log = log
        self.cache: dict[str, np.ndarray] = {}
        self.computed = 0
        self.skipped = 0
        self.notes: list[str] = []

    # ---------------------------------------------------------------- helpers
    def emb(self, run_id) -> np.ndarray:
        if run_id not in self.cache:
            self.cache[run_id] = load_run(self.con, run_id).astype(np.float64)
        return self.cache[run_id]

    def params_for(self, metric):
        return {"k": self.k} if "k" in get_metric(metric).params else {}

    def note(self, msg):
        self.notes.append(msg)
        self.log(f"note: {msg}")

    def _fresh(self, table, result_id, input_key) -> bool:
        if R.is_current(self.con, table, result_id, input_key):
            self.skipped += 1
            return False
        self.computed += 1
        return True

    # ---------------------------------------------------------------- entry
    def run(self, datasets=None):
        rows = R.rows(self.con, "SELECT * FROM runs ORDER BY dataset, model")
        if not rows:
            raise StoreError("the store has no runs yet; run `layerscope precompute` or `layerscope demo` first")
        unfinished = [r for r in rows if r["status"] != "done"]
        for r in unfinished:
            self.note(f"run {r['run_id']} ({r['model']} on {r['dataset']}) is not done "
                      f"({r['n_done']}/{r['n_items']}); left out — rerun its precompute command to finish it")
        by_dataset = defaultdict(list)
        for r in rows:
            if r["status"] == "done":
                by_dataset[r["dataset"]].append(r)
        if datasets:
            missing = set(datasets) - set(by_dataset)
            if missing:
                raise StoreError(f"no done runs for dataset(s) {sorted(missing)}; datasets: {sorted(by_dataset)}")
        for ds, runs in by_dataset.items():
            if datasets and ds not in datasets:
                continue
            self.dataset(ds, runs)
        return {"computed": self.computed, "skipped": self.skipped, "notes": self.notes}

    def dataset(self, ds, runs):
        n = runs[0]["n_items"]
        if n <= self.k:
            self.note(f"dataset {ds!r} has {n} items, too few for k={self.k}: pass a smaller --k; skipped")
            return
        self.log(f"analyze {ds}: {len(runs)} run(s)")
        originals = [r for r in runs if r["variant"] == "original"]
        vision = [r for r in originals if r["modality"] in VISION]
        text = [r for r in originals if r["modality"] == "text"]
        self.profiles(ds, originals)
        grids = self.vision_text_grids(ds, vision, text)
        self.vision_vision_grids(ds, vision)
        self.scaling(ds, grids)
        self.model_map(ds, vision, text)
        self.downstream(ds, vision, text)
        self.temporal(ds, runs, vision, text)
        self.layer_choice(ds, originals, grids)

    # ---------------------------------------------------------------- profiles and grids
    def profiles(self, ds, runs):
        for r in runs:
            for metric in PROFILE_METRICS:
                rid = R.key("profile", r["run_id"], metric, ANALYSIS_VERSION)
                ikey = R.key(r["run_id"], r["finished"])
                if not self._fresh("result_profiles", rid, ikey):
                    continue
                # LID's MLE uses 20 neighbours; small datasets use as many as they have
                params = {"k": min(20, r["n_items"] - 1)} if metric == "lid" else {}
                with np.errstate(divide="ignore", invalid="ignore"):
                    values = layer_profile(self.emb(r["run_id"]), metric=metric, **params)
                R.put_profile(self.con, result_id=rid, dataset=ds, model=r["model"], run_id=r["run_id"],
                              modality=r["modality"], n_frames=r["n_frames"], n_captions=r["n_captions"],
                              metric=metric, params=params, layer_values=values, input_key=ikey)

    def _grid(self, ds, kind, a, b, metric):
        params = self.params_for(metric)
        rid = R.key("grid", a["run_id"], b["run_id"], metric, params, ANALYSIS_VERSION)
        ikey = R.key(a["run_id"], a["finished"], b["run_id"], b["finished"], self.n_boot, self.seed)
        if not self._fresh("result_grids", rid, ikey):
            return rid
        A, B = self.emb(a["run_id"]), self.emb(b["run_id"])
        grid = layer_grid(A, B, metric=metric, **params)
        spec = get_metric(metric)
        la, lb, value = best_cell(grid, higher_is_better=spec.higher_is_better is not False)
        lo = hi = None
        if self.n_boot >= 2:
            ci = bootstrap_ci(metric, A[la], B[lb], n_boot=self.n_boot, seed=self.seed, **params)
            lo, hi = ci.low, ci.high
        R.put_grid(self.con, result_id=rid, dataset=ds, pair_kind=kind, model_a=a["model"], model_b=b["model"],
                   run_a=a["run_id"], run_b=b["run_id"], n_frames=a["n_frames"],
                   n_captions=b["n_captions"] if kind == "vision_text" else None,
                   n_frames_b=b["n_frames"] if kind == "vision_vision" else None, metric=metric, params=params,
                   grid=grid, best_a=la, best_b=lb, best_value=value, ci_low=lo, ci_high=hi,
                   n_boot=self.n_boot if self.n_boot >= 2 else 0, input_key=ikey)
        return rid

    def vision_text_grids(self, ds, vision, text):
        if not vision or not text:
            self.note(f"dataset {ds!r}: no vision×text pair of done runs (vision: {len(vision)}, text: {len(text)}); "
                      "grids, scaling and temporal alignment need both")
            return []
        out = []
        for a in vision:
            for b in text:
                for metric in self.metrics:
                    self._grid(ds, "vision_text", a, b, metric)
                    out.append((a, b, metric))
        return out

    def vision_vision_grids(self, ds, vision):
        by_model = defaultdict(dict)
        for r in vision:
            by_model[r["model"]][r["n_frames"]] = r
        models = sorted(by_model)
        for i, ma in enumerate(models):
            for mb in models[i + 1:]:
                for n_f in sorted(set(by_model[ma]) & set(by_model[mb])):
                    for metric in self.metrics:
                        self._grid(ds, "vision_vision", by_model[ma][n_f], by_model[mb][n_f], metric)

    # ---------------------------------------------------------------- scaling laws
    def scaling(self, ds, grids):
        pairs = defaultdict(list)
        for a, b, metric in grids:
            pairs[(a["model"], b["model"], metric)].append((a, b))
        for (va, tb, metric), runs in pairs.items():
            spec = get_metric(metric)
            params = self.params_for(metric)
            rid = R.key("scaling", ds, va, tb, metric, params, ANALYSIS_VERSION)
            ikey = R.key(sorted((a["run_id"], str(a["finished"]), b["run_id"], str(b["finished"])) for a, b in runs),
                         self.n_boot, self.seed)
            if not self._fresh("result_studies", rid, ikey):
                continue
            points = []
            for a, b in runs:
                g = R.read_grids(self.con, run_a=a["run_id"], run_b=b["run_id"], metric=metric)[0]
                points.append((a["n_frames"], b["n_captions"], g["best_value"], g["best_a"], g["best_b"], a, b))
            nf = np.array([p[0] for p in points], float)
            nc = np.array([p[1] for p in points], float)
            y = np.array([p[2] for p in points], float)
            payload = {"n_frames": nf.tolist(), "n_captions": nc.tolist(), "scores": y.tolist(),
                       "layers": [[p[3], p[4]] for p in points], "higher_is_better": spec.higher_is_better}
            try:
                fit = fit_scaling_law(nf, nc, y, seed=self.seed)
                payload["fit"] = {"params": fit.params, "r2": fit.r2, "rmse": fit.rmse, "n_points": fit.n_points}
                payload["forms"] = compare_forms(nf, nc, y, seed=self.seed)
                n_boot = min(self.n_boot, 50)
                if n_boot >= 2:
                    samples = self._scaling_bootstrap(points, metric, params, n_boot)
                    try:
                        payload["intervals"] = bootstrap_params(samples, nf, nc, seed=self.seed)
                        payload["intervals_n_boot"] = n_boot
                    except ValueError as exc:
                        payload["intervals_error"] = str(exc)
            except TooFewPoints as exc:
                payload["error"] = str(exc)
            R.put_study(self.con, result_id=rid, study="scaling", dataset=ds, subject=f"{va}|{tb}|{metric}",
                        params={"metric": metric, **params, "n_boot": self.n_boot}, payload=payload, input_key=ikey)

    def _scaling_bootstrap(self, points, metric, params, n_boot):
        """Scores at each grid point's best layer pair, on item resamples shared across grid points."""
        spec = get_metric(metric)
        rng = np.random.default_rng(self.seed)
        n = self.emb(points[0][5]["run_id"]).shape[1]
        out = np.empty((n_boot, len(points)))
        for bi in range(n_boot):
            ix = rng.integers(0, n, n)
            for j, (_, _, _, la, lb, a, b) in enumerate(points):
                out[bi, j] = spec(self.emb(a["run_id"])[la][ix], self.emb(b["run_id"])[lb][ix], **params)
        return out

    # ---------------------------------------------------------------- model map
    @staticmethod
    def _max_setting_runs(vision, text):
        """Each model's run at its largest setting. A model with both sides (an MLLM) keeps its name
        for the video side and appears as ``"<model> [text]"`` for its caption side."""
        chosen = {}
        for r in vision:
            if r["model"] not in chosen or r["n_frames"] > chosen[r["model"]]["n_frames"]:
                chosen[r["model"]] = r
        vision_models = set(chosen)
        for r in text:
            key = f"{r['model']} [text]" if r["model"] in vision_models else r["model"]
            if key not in chosen or r["n_captions"] > chosen[key]["n_captions"]:
                chosen[key] = r
        return chosen

    def model_map(self, ds, vision, text):
        chosen = self._max_setting_runs(vision, text)
        names = sorted(chosen)
        if len(names) < 2:
            self.note(f"dataset {ds!r}: a model map needs at least 2 models, the store has {len(names)}")
            return
        rid = R.key("model_map", ds, names, self.k, ANALYSIS_VERSION)
        ikey = R.key([(chosen[m]["run_id"], str(chosen[m]["finished"])) for m in names])
        if not self._fresh("result_studies", rid, ikey):
            return
        M = len(names)
        S = np.eye(M)
        layers = [[None] * M for _ in range(M)]
        for i in range(M):
            for j in range(i + 1, M):
                g = layer_grid(self.emb(chosen[names[i]]["run_id"]), self.emb(chosen[names[j]]["run_id"]),
                               metric="mutual_knn", k=self.k)
                la, lb, v = best_cell(g)
                S[i, j] = S[j, i] = v
                layers[i][j], layers[j][i] = [la, lb], [lb, la]
        mm = model_map(S, names)
        payload = {"models": names, "similarity": S.tolist(), "order": mm.order, "coords": mm.coords.tolist(),
                   "clusters": mm.clusters, "best_layers": layers,
                   "settings": {m: {"run_id": chosen[m]["run_id"], "modality": chosen[m]["modality"],
                                    "n_frames": chosen[m]["n_frames"], "n_captions": chosen[m]["n_captions"]}
                                for m in names},
                   "metric": "mutual_knn"}
        R.put_study(self.con, result_id=rid, study="model_map", dataset=ds, subject="all",
                    params={"k": self.k, "metric": "mutual_knn"}, payload=payload, input_key=ikey)

    # ---------------------------------------------------------------- downstream
    def downstream(self, ds, vision, text):
        rows = R.rows(self.con, "SELECT * FROM downstream_results ORDER BY task, model")
        if not rows:
            return
        chosen = self._max_setting_runs(vision, text)
        refs = self.references or sorted({r["model"] for r in text})
        tasks = defaultdict(dict)
        hib = {}
        for r in rows:
            tasks[(r["task"], r["metric"])][r["model"]] = r["value"]
            hib[(r["task"], r["metric"])] = r["higher_is_better"]
        rid = R.key("downstream", ds, refs, self.k, ANALYSIS_VERSION)
        ikey = R.key(rows, [(m, c["run_id"], str(c["finished"])) for m, c in sorted(chosen.items())], self.n_boot)
        if not self._fresh("result_studies", rid, ikey):
            return
        # label-free scores per model: alignment with each reference at the best layer pair, and
        # per-layer curves (alignment row maxima, RankMe) for the depth curves
        scores, curves = defaultdict(dict), defaultdict(dict)
        for m, run in chosen.items():
            E = self.emb(run["run_id"])
            for ref in refs:
                if ref == m or ref not in chosen:
                    continue
                g = layer_grid(E, self.emb(chosen[ref]["run_id"]), metric="mutual_knn", k=self.k)
                scores[f"alignment with {ref}"][m] = float(g.max())
                curves[f"alignment with {ref}"][m] = g.max(axis=1)
            rk = layer_profile(E, metric="rankme")
            scores["rankme at last layer"][m] = float(rk[-1])
            curves["rankme"][m] = rk
        table = []
        for (task, tmetric), res in tasks.items():
            for score_name, per_model in scores.items():
                common = sorted(set(per_model) & set(res))
                entry = {"task": task, "task_metric": tmetric, "score": score_name, "models": common,
                         "x": [per_model[m] for m in common], "y": [res[m] for m in common],
                         "higher_is_better": bool(hib[(task, tmetric)])}
                try:
                    c = correlate(entry["x"], entry["y"], higher_is_better=entry["higher_is_better"],
                                  n_boot=self.n_boot, seed=self.seed)
                    entry.update(c.__dict__)
                except ValueError as exc:
                    entry["error"] = str(exc)
                table.append(entry)
            for curve_name, per_model in curves.items():
                try:
                    table.append({"task": task, "task_metric": tmetric, "curve": curve_name,
                                  **depth_curve(per_model, res, higher_is_better=bool(hib[(task, tmetric)]))})
                except ValueError as exc:
                    table.append({"task": task, "task_metric": tmetric, "curve": curve_name, "error": str(exc)})
        unknown = sorted({r["model"] for r in rows} - set(chosen))
        R.put_study(self.con, result_id=rid, study="downstream", dataset=ds, subject="all",
                    params={"k": self.k, "references": refs, "n_boot": self.n_boot},
                    payload={"rows": table, "models_without_runs": unknown}, input_key=ikey)

    # ---------------------------------------------------------------- temporal probes
    def temporal(self, ds, runs, vision, text):
        meta = R.rows(self.con, "SELECT idx, metadata, negatives FROM items WHERE dataset = ? ORDER BY idx", [ds])
        md = [json.loads(m["metadata"]) if isinstance(m["metadata"], str) else (m["metadata"] or {}) for m in meta]
        has_tot = all({"event", "phrasing", "bow_key"} <= set(m) for m in md)
        negatives = {r["model"]: r for r in runs if r["variant"] == "negative"}
        reversed_runs = {(r["model"], r["n_frames"]): r for r in runs if r["variant"] == "reversed"}
        if not (has_tot or negatives or reversed_runs):
            return
        inputs = sorted((r["run_id"], str(r["finished"])) for r in runs)
        rid = R.key("temporal", ds, self.k, ANALYSIS_VERSION)
        ikey = R.key(inputs)
        if not self._fresh("result_studies", rid, ikey):
            return
        payload = {"test_of_time": [], "reorder": [], "arrow_of_time": [], "chiral": [], "notes": []}
        v_top = self._max_setting_runs(vision, [])
        t_one = {}
        for r in text:  # the probes compare single captions: n_c = 1
            if r["n_captions"] == 1:
                t_one[r["model"]] = r
        if has_tot:
            event = [m["event"] for m in md]
            phrasing = [m["phrasing"] for m in md]
            bow = [m["bow_key"] for m in md]
            for vm, vr in v_top.items():
                for tm, tr in t_one.items():
                    V, T = self.emb(vr["run_id"]), self.emb(tr["run_id"])
                    by_k = {}
                    for kk in (1, 2, 3):
                        g = layer_grid(V, T, metric="mutual_knn", k=kk)
                        la, lb, v = best_cell(g)
                        by_k[str(kk)] = {"value": v, "layers": [la, lb], "grid": g.tolist()}
                    la, lb = by_k["1"]["layers"]
                    payload["test_of_time"].append({
                        "vision": vm, "text": tm, "n_frames": vr["n_frames"], "alignment": by_k,
                        "first_neighbours": {
                            "vision": first_neighbour_types(V[la], event=event, phrasing=phrasing, bow=bow),
                            "text": first_neighbour_types(T[lb], event=event, phrasing=phrasing, bow=bow),
                            "layers": [la, lb]},
                        "first_neighbours_per_layer": {
                            "vision": [first_neighbour_types(x, event=event, phrasing=phrasing, bow=bow) for x in V],
                            "text": [first_neighbour_types(x, event=event, phrasing=phrasing, bow=bow) for x in T]},
                    })
        has_neg = np.array([bool(m["negatives"]) for m in meta])
        for tm, neg_run in negatives.items():
            if tm not in t_one:
                continue
            keep = np.flatnonzero(has_neg)
            if len(keep) <= self.k:
                payload["notes"].append(f"{tm}: only {len(keep)} items have negatives; reorder probe skipped")
                continue
            P, Nn = self.emb(t_one[tm]["run_id"]), self.emb(neg_run["run_id"])
            for vm, vr in v_top.items():
                V = self.emb(vr["run_id"])
                pos = np.zeros((len(V), len(P)))
                neg = np.zeros_like(pos)
                for a in range(len(V)):
                    for b in range(len(P)):
                        r = reorder_alignment(V[a][keep], P[b][keep], Nn[b][keep], k=self.k)
                        pos[a, b], neg[a, b] = r["positive"], r["negative"]
                payload["reorder"].append({"vision": vm, "text": tm, "n_items": int(len(keep)),
                                           "positive": pos.tolist(), "negative": neg.tolist()})
        for (vm, n_f), rr in sorted(reversed_runs.items()):
            fwd = next((r for r in vision if r["model"] == vm and r["n_frames"] == n_f), None)
            if fwd is None:
                continue
            V, Vr = self.emb(fwd["run_id"]), self.emb(rr["run_id"])
            payload["arrow_of_time"].append({"vision": vm, "n_frames": n_f,
                                             "per_layer": [_or_nan(arrow_of_time, V[l], Vr[l]) for l in range(len(V))]})
        shared = sorted({r["model"] for r in vision} & set(negatives) & set(t_one))
        if not shared:
            payload["notes"].append("chiral retrieval needs a model that embeds video and text in one space "
                                    "(e.g. a CLIP-like model precomputed as both); none in this store")
        for m in shared:
            V = self.emb(v_top[m]["run_id"])
            P, Nn = self.emb(t_one[m]["run_id"]), self.emb(negatives[m]["run_id"])
            keep = np.flatnonzero(has_neg)
            payload["chiral"].append({"model": m, "per_layer": [
                chiral_accuracy(V[l][keep], P[l][keep], Nn[l][keep]) for l in range(min(len(V), len(P)))]})
        R.put_study(self.con, result_id=rid, study="temporal", dataset=ds, subject="all",
                    params={"k": self.k}, payload=payload, input_key=ikey)

    # ---------------------------------------------------------------- layer recommendation
    def layer_choice(self, ds, originals, grids):
        chosen = self._max_setting_runs([r for r in originals if r["modality"] in VISION],
                                        [r for r in originals if r["modality"] == "text"])
        for m, run in chosen.items():
            curves, sources = {}, {}
            for prof in R.read_profiles(self.con, run_id=run["run_id"]):
                hib = get_metric(prof["metric"]).higher_is_better
                if hib is None:
                    continue  # LID has no direction: shown, not used to pick
                curves[prof["metric"]] = (prof["layer_values"], hib)
            for g in R.read_grids(self.con, dataset=ds, metric="mutual_knn", pair_kind="vision_text"):
                if g["run_a"] == run["run_id"] and g["run_b"] == chosen.get(g["model_b"], {}).get("run_id"):
                    curves[f"alignment with {g['model_b']}"] = (g["grid"].max(axis=1), True)
                    sources[f"alignment with {g['model_b']}"] = g["result_id"]
                elif g["run_b"] == run["run_id"] and g["run_a"] == chosen.get(g["model_a"], {}).get("run_id"):
                    curves[f"alignment with {g['model_a']}"] = (g["grid"].max(axis=0), True)
                    sources[f"alignment with {g['model_a']}"] = g["result_id"]
            if not curves:
                continue
            rid = R.key("layer_choice", ds, m, ANALYSIS_VERSION)
            ikey = R.key(run["run_id"], str(run["finished"]), sorted(sources.values()),
                         {k: np.asarray(v[0]).round(12).tolist() for k, v in curves.items()})
            if not self._fresh("result_studies", rid, ikey):
                continue
            rec = recommend_layers(curves)
            rec["curves"] = {k: np.asarray(v[0]).tolist() for k, v in curves.items()}
            rec["higher_is_better"] = {k: v[1] for k, v in curves.items()}
            rec["setting"] = {"run_id": run["run_id"], "modality": run["modality"], "n_frames": run["n_frames"],
                              "n_captions": run["n_captions"]}
            R.put_study(self.con, result_id=rid, study="layer_choice", dataset=ds, subject=m,
                        params={"k": self.k}, payload=rec, input_key=ikey)


def _or_nan(fn, *args, **kw) -> float:
    """A per-layer value, NaN where it is undefined (e.g. a CLS token at layer 0 is one constant vector)."""
    try:
        return fn(*args, **kw)
    except ValueError:
        return float("nan")


RESULT_TABLES = ("result_grids", "result_profiles", "result_studies")


def _drop_stale_results(con, log) -> None:
    """Result tables are caches: when their payloads changed shape (a new ANALYSIS_VERSION), clear
    them rather than mix two formats. Embeddings and downstream results are never touched."""
    row = con.execute("SELECT value FROM meta WHERE key = 'analysis_version'").fetchall()
    if row and row[0][0] == str(ANALYSIS_VERSION):
        return
    con.execute("BEGIN")
    for table in RESULT_TABLES:
        con.execute(f"DELETE FROM {table}")
    con.execute("INSERT INTO meta VALUES ('analysis_version', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [str(ANALYSIS_VERSION)])
    con.execute("COMMIT")
    if row:
        log(f"note: cached results were from analysis version {row[0][0]}; recomputing all (now {ANALYSIS_VERSION})")


def analyze_store(store, *, k=10, metrics=("mutual_knn", "cka", "cknna"), references=None, n_boot=200,
                  datasets=None, seed=0, log=print) -> dict:
    """Compute every study the store supports; idempotent (unchanged inputs are skipped)."""
    con = connect(store, read_only=False)
    try:
        create_all(con, str(store))
        known = {r[0] for r in con.execute("SELECT model FROM models").fetchall()}
        bad_refs = [r for r in (references or []) if r not in known]
        if bad_refs:
            raise StoreError(f"unknown --reference model(s) {bad_refs}; models: {sorted(known)}")
        _drop_stale_results(con, log)
        job = Analysis(con, k=k, metrics=metrics, references=references, n_boot=n_boot, seed=seed, log=log)
        return job.run(datasets)
    finally:
        con.close()
