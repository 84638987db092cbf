"""Background jobs: long store work (downstream import, re-analysis) in a subprocess, off the request path.

The dashboard must not run ``layerscope analyze`` inside a page request: on a real store it takes
minutes, and the page would hang. :func:`start` launches ``python -m analysis.jobs run JOB_DIR`` as a
detached subprocess and returns at once; the child does the work and writes its progress to
``JOB_DIR/status.json`` (atomically, so a reader never sees half a file) and every log line to
``JOB_DIR/log.txt``. Any page can then show :func:`latest` on each rerun or refresh.

Jobs live next to the store in ``<store>.jobs/<job id>/``. One job at a time per store: DuckDB lets
one process write, so a second job would only wait for the first's lock; :func:`start` returns the
running job instead. The analysis reuses the store's own settings (``stored_settings``: k, metrics,
bootstrap, seed, clamp...) exactly as ``layerscope analyze --store STORE`` without flags does, so the
dashboard never recomputes everything with different settings.

Status (``status.json``)::

    {"id": str, "kind": "analyze" | "import" | "map", "state": "running" | "done" | "error" | "cancelled",
     "step": str,            # what the job is doing now, e.g. "analysing (the store's settings: k=10, ...)"
     "message": str,         # the last log line, or the result when done, or the one-line error
     "lines": int,           # log lines so far
     "pid": int, "started": float, "finished": float | None (Unix seconds),
     "progress": [done, total] | None,   # the analyze log's study counter ("[3/22] ..."), when it has one
     "eta_s": float | None}              # seconds left, at the mean pace so far (elapsed · (total − done) / done)

:func:`cancel` ends a running job: its whole process group (the child runs in its own session) is
sent SIGTERM and the status says ``cancelled``. The store stays as it was before the study being
computed: each study's rows are written in one transaction at its end (``ctx.flush``), so a cancelled
analysis leaves complete earlier studies and nothing of the interrupted one, and records that it was
cancelled there (``terminated``, :mod:`analysis.storage.last_analysis`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

KINDS = ("analyze", "import", "map")
#: what a map job's ``request`` names (``layerscope map``'s options; see
#: :func:`analysis.studies.embedding_map.request_map`)
MAP_REQUEST = ("dataset", "model", "layer", "side", "method")
REPO = Path(__file__).resolve().parents[1]
#: seconds a started child may take to write its first status before the job counts as failed
STARTUP_S = 60.0

#: handles of the children this process started: ``poll()`` reaps them, so a finished child is not
#: mistaken for a live one (a zombie still answers ``os.kill(pid, 0)``)
_CHILDREN: dict[int, subprocess.Popen] = {}


def jobs_dir(store) -> Path:
    """``<store>.jobs/``: where the store's jobs keep their status and logs."""
    store = Path(store)
    return store.with_name(store.name + ".jobs")


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)  # atomic: a page reading the status never sees half a file


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int | None, started: float) -> bool:
    if pid is None:  # the child has not written its own status yet: give it a minute to start
        return time.time() - started < STARTUP_S
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process holds the number: not our job
        return False
    return True


_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\] ")


def parse_progress(line: str) -> tuple[int, int] | None:
    """``(done, total)`` from an analyze log line ``"[done/total] ..."``
    (:func:`analysis.studies.progress_line`), else ``None`` (also for a total of 0 or done > total)."""
    m = _PROGRESS.match(str(line))
    if not m:
        return None
    done, total = int(m.group(1)), int(m.group(2))
    return (done, total) if 0 <= done <= total and total > 0 else None


def eta_seconds(done: int, total: int, elapsed: float) -> float | None:
    """Seconds left at the mean pace so far: ``elapsed · (total − done) / done``; ``None`` before the first
    step (no pace yet)."""
    if done <= 0 or total <= 0:
        return None
    return float(elapsed) * (total - done) / done


def progress_text(job: dict) -> str:
    """``", 45%, about 2 min left"`` from a status's ``progress`` and ``eta_s``; ``""`` without a counter."""
    prog = job.get("progress")
    if not prog or not prog[1]:
        return ""
    text = f", {100 * prog[0] / prog[1]:.0f}% ({prog[0]}/{prog[1]} studies)"
    eta = job.get("eta_s")
    if eta is not None:
        text += f", about {eta:.0f} s left" if eta < 120 else f", about {eta / 60:.0f} min left"
    return text


#: a cancelled job's message
CANCELLED = "cancelled; the store keeps every study completed before it (each is written whole)"


def cancel(job_dir, *, wait: float = 5.0) -> dict | None:
    """End a running job: SIGTERM to its process group (SIGKILL when it has not ended within ``wait``
    seconds), then its status says ``cancelled``. An analysis takes SIGTERM as its end
    (:mod:`analysis.signals`): it records in the store where it stopped, says ``cancelled`` itself and
    exits with 143. A job that is not running is left as it is. Returns the status."""
    job_dir = Path(job_dir)
    st = status(job_dir)
    if st is None or st.get("state") != "running":
        return st
    pid = st.get("pid")
    if pid is not None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), sig)  # the child leads its own session: its group id is its pid
            deadline = time.monotonic() + wait
            while _alive(int(pid), 0.0) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _alive(int(pid), 0.0):
                break
    st = _read_json(job_dir / "status.json") or st
    if st.get("state") == "running":  # not finished on its own meanwhile, nor said it was cancelled
        st.update(state="cancelled", finished=time.time(), eta_s=None, message=CANCELLED)
        _write_json(job_dir / "status.json", st)
    return st


def one_line(exc: BaseException) -> str:
    """An error as one line: its type when the message alone would not say what failed."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, (ValueError, OSError)) and type(exc).__name__ not in text:
        text = f"{type(exc).__name__}: {text}"
    return text[:400]


def status(job_dir) -> dict | None:
    """A job's status, with ``state`` set to ``"error"`` when its process ended without saying so
    (killed, out of memory): such a job would otherwise look "running" forever."""
    job_dir = Path(job_dir)
    st = _read_json(job_dir / "status.json")
    if st is None:
        return None
    if st.get("state") == "running" and not _alive(st.get("pid"), st.get("started") or 0):
        st = _read_json(job_dir / "status.json") or st  # it may have finished between the two reads
        if st.get("state") == "running":
            st.update(state="error", finished=time.time(),
                      message=f"the job's process ({st.get('pid')}) stopped without finishing; see "
                              f"{job_dir / 'log.txt'}")
    return st


def _job_id(kind: str) -> str:
    """``YYYYmmdd-HHMMSS-<nanoseconds>-<kind>``: a job folder's name, whose order is the jobs' start
    order (:func:`latest` takes the last by name). Both parts come from one clock reading: read
    apart, a start on a second's boundary got the earlier second with the next one's nanoseconds
    and sorted before the job just before it."""
    now = time.time_ns()
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(now // 10**9)) + f"-{now % 10**9:09d}-{kind}"


def latest(store) -> dict | None:
    """The status of the store's most recent job (``None`` when it has had none)."""
    root = jobs_dir(store)
    if not root.is_dir():
        return None
    dirs = sorted((d for d in root.iterdir() if (d / "status.json").exists()), key=lambda d: d.name)
    return status(dirs[-1]) if dirs else None


@contextlib.contextmanager
def _start_lock(root: Path):
    """An exclusive ``flock`` on ``root/start.lock`` for the block: between processes, and between
    threads of one process too (each ``open`` is its own open file description, and flock locks
    conflict across descriptions). Released when the file closes, also when the holder dies."""
    import fcntl

    with open(root / "start.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def start(store, kind: str, *, csv: bytes | None = None, jobs: int | None = None,
          request: dict | None = None) -> dict:
    """Start a background job on ``store`` and return its first status at once.

    ``kind``: ``"analyze"`` (what ``layerscope analyze --store STORE`` does, with the store's settings),
    ``"import"`` (``layerscope downstream import`` of the ``csv`` bytes, then analyze) or ``"map"`` (what
    ``layerscope map`` does with ``request``: :data:`MAP_REQUEST`, dataset, model and layer required).
    ``jobs``: worker processes for the analysis (default 1: the dashboard's machine stays responsive).
    When a job is already running on this store, that job's status is returned and nothing new starts.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown job kind {kind!r}; expected one of {', '.join(KINDS)}")
    if kind == "import" and not csv:
        raise ValueError("an import job needs the CSV's bytes")
    if kind == "map":
        request = dict(request or {})
        unknown = sorted(set(request) - set(MAP_REQUEST))
        missing = [k for k in ("dataset", "model", "layer") if request.get(k) is None]
        if unknown or missing:
            raise ValueError(f"a map job needs {', '.join(MAP_REQUEST[:3])} (and may name side, method): "
                             f"missing {', '.join(missing) or 'none'}, unknown {', '.join(unknown) or 'none'}")
    store = Path(store).absolute()  # the child runs in the repository: a relative path would name another file
    root = jobs_dir(store)
    root.mkdir(parents=True, exist_ok=True)
    # check-then-create under one lock: without it, pages starting at once each saw no running job
    # and each started one. The job's status.json ("running") is written before the lock is let go,
    # so the next starter's check finds it.
    with _start_lock(root):
        running = latest(store)
        if running is not None and running.get("state") == "running":
            return running
        job_id = _job_id(kind)
        job_dir = root / job_id
        job_dir.mkdir()
        spec = {"id": job_id, "kind": kind, "store": str(Path(store).resolve()), "jobs": int(jobs or 1)}
        if kind == "map":
            spec["request"] = request
        if csv:
            (job_dir / "upload.csv").write_bytes(csv)
            spec["csv"] = str((job_dir / "upload.csv").resolve())  # the child runs in another folder
        _write_json(job_dir / "spec.json", spec)
        # the status exists before the child does: a page never finds a job directory without one
        _write_json(job_dir / "status.json", {"id": job_id, "kind": kind, "state": "running", "step": "starting",
                                              "message": "", "lines": 0, "pid": None, "started": time.time(),
                                              "finished": None})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    with open(job_dir / "output.txt", "wb") as out:
        child = subprocess.Popen([sys.executable, "-m", "analysis.jobs", "run", str(job_dir.resolve())], cwd=str(REPO), env=env,
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)  # its own session: a page rerun does not stop it
    _CHILDREN[child.pid] = child
    return status(job_dir)


def settings_text(settings: dict) -> str:
    """The store's analysis settings in one line (``{}``: never analysed, so the defaults)."""
    if not settings:
        return "the defaults (the store was never analysed)"
    keys = ("k", "metrics", "n_boot", "seed", "clamp", "reorder_k", "downstream_setting", "n_null")
    parts = []
    for k in keys:
        if k in settings:
            v = settings[k]
            parts.append(f"{k}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}")
    return ", ".join(parts)


def run(job_dir) -> int:
    """The child's side: do the job in ``job_dir`` and keep ``status.json`` current. Returns 0, 1 (an
    error) or 143 (cancelled: SIGTERM, :func:`cancel`)."""
    job_dir = Path(job_dir)
    spec = _read_json(job_dir / "spec.json")
    if spec is None:
        print(f"no job spec in {job_dir}", file=sys.stderr)
        return 1
    st = {"id": spec["id"], "kind": spec["kind"], "state": "running", "step": "starting", "message": "",
          "lines": 0, "pid": os.getpid(), "started": time.time(), "finished": None, "progress": None, "eta_s": None}
    _write_json(job_dir / "status.json", st)
    log_file = open(job_dir / "log.txt", "a", encoding="utf-8")  # noqa: SIM115 - closed in the finally below

    def log(message) -> None:
        line = " ".join(str(message).split())
        log_file.write(line + "\n")
        log_file.flush()
        st.update(message=line[:300], lines=st["lines"] + 1)
        counted = parse_progress(line)
        if counted:
            st.update(progress=list(counted), eta_s=eta_seconds(*counted, time.time() - st["started"]))
        _write_json(job_dir / "status.json", st)

    def step(text: str) -> None:
        st["step"] = text
        log(text)

    try:
        from analysis.storage.store import read_store
        from analysis.studies import analyze_store, stored_settings

        store = spec["store"]
        if spec["kind"] == "map":
            return _run_map(store, spec["request"], st, step, log)
        if spec["kind"] == "import":
            from analysis.storage.downstream_import import import_downstream

            step("importing the downstream results")
            n = import_downstream(store, spec["csv"])
            log(f"{n} downstream result(s) imported")
        settings = read_store(store, stored_settings, wait=30.0)
        step(f"analysing with the store's settings ({settings_text(settings)})")
        out = analyze_store(store, jobs=int(spec.get("jobs") or 1), log=log)  # None settings: the store's own
        st.update(state="done", step="done", finished=time.time(), eta_s=None,
                  message=f"{out['computed']} result(s) computed, {out['skipped']} unchanged and reused, "
                          f"{len(out['notes'])} note(s)")
        log(st["message"])
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the page as one line
        from analysis.signals import Terminated

        if isinstance(exc, Terminated):  # cancelled (:func:`cancel`): the analysis recorded where it stopped
            st.update(state="cancelled", finished=time.time(), eta_s=None, message=CANCELLED)
            log(CANCELLED)
            return Terminated.EXIT_CODE
        message = one_line(exc)
        if spec.get("csv"):  # the upload's temporary path says nothing to the person who uploaded it
            message = message.replace(spec["csv"], "the uploaded CSV")
        log(f"error: {message}")
        st.update(state="error", finished=time.time(), message=message)
        return 1
    finally:
        _write_json(job_dir / "status.json", st)
        log_file.close()


def _run_map(store, request: dict, st: dict, step, log) -> int:
    """A map job's work: one map computed and kept (:func:`analysis.studies.embedding_map.request_map`)."""
    from analysis.studies.embedding_map import request_map

    r = dict(request)
    step(f"computing the {r.get('method') or 'umap'} map of {r['model']} layer {r['layer']} on {r['dataset']}")
    out = request_map(store, log=log, **r)
    text = (f"map {out['subject']} {'computed' if out['computed'] else 'already current'}"
            + (f"; no picture: {out['reason']}" if out.get("reason") else ""))
    st.update(state="done", step="done", finished=time.time(), eta_s=None, message=text)
    log(text)
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "run":
        print("usage: python -m analysis.jobs run JOB_DIR", file=sys.stderr)
        return 2
    return run(argv[1])


if __name__ == "__main__":
    sys.exit(main())
