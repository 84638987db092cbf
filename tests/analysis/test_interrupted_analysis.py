"""A ``layerscope analyze`` that stops part-way (Ctrl-C, a failing study, a killed process) leaves a
store that says so: where it stopped, which results are shown (the studies it finished, or the
dataset's previous complete analysis), and how to finish it; running it again resumes from what is
stored, and the results then equal those of an analysis that was never interrupted.

The expected rows come from an independent, uninterrupted analysis of a copy of the same runs."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from analysis.storage import last_analysis
from analysis.storage.store import is_interrupt
from analysis.studies import STUDY_ORDER, analyze_store
from analysis.views.store_info import dataset_context, overview, unfinished_analysis
from analysis.views.verdicts import verdicts
from precompute.cli import main
from tests.stores import read_store as _read
from tests.helpers import make_report, quiet
from tests.stores import (CHEAP_ANALYSIS, analysed_copy, current_rows, result_tables, rows_of_studies,
                          stopped_analysis, write_store)

ROOT = Path(__file__).resolve().parents[2]
#: small and quick, but every study runs (k < 12 items)
CHEAP = CHEAP_ANALYSIS
#: the same settings as ``layerscope analyze`` flags
CHEAP_FLAGS = ["--k", "3", "--bootstrap", "0", "--maps", "0", "--null-perms", "0", "--jobs", "1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two models (video, text) on 12 items, never analysed."""
    path = tmp_path_factory.mktemp("interrupted") / "runs.duckdb"
    write_store(path)
    return path


@pytest.fixture(scope="module")
def whole(runs, tmp_path_factory):
    """The runs analysed once, uninterrupted, with :data:`CHEAP`."""
    return analysed_copy(runs, tmp_path_factory.mktemp("interrupted") / "whole.duckdb", **CHEAP)


def _copy(store, tmp_path, name="store.duckdb"):
    out = tmp_path / name
    shutil.copy(store, out)
    return out


def test_an_interrupted_first_analysis_shows_the_studies_it_finished_and_says_where_it_stopped(runs, whole, tmp_path):
    store = _copy(runs, tmp_path)
    stopped_analysis(store, "scaling", **CHEAP)
    run = _read(store, last_analysis.read)
    assert (run.state, run.dataset, run.study) == ("interrupted", "toy", "scaling")
    assert run.finished == {"toy": ["profiles", "grids", "probes"]} and run.ended is not None
    # the studies it finished are shown whole, as the uninterrupted analysis has them; none after them
    expected = _read(whole, rows_of_studies, ("profiles", "grids", "probes"))
    assert expected["result_grids"] and expected["result_profiles"]
    assert _read(store, current_rows) == expected
    said = _read(store, unfinished_analysis, str(store))
    for needle in ("did not finish", "interrupted during scaling of dataset toy",
                   "studies it completed (profiles, grids, probes)", "verdicts"):
        assert needle in said.sentence, said.sentence
    # never analysed before, so `layerscope analyze` alone would use the default settings, not these
    assert said.command is None
    assert "k=3" in said.sentence and "k=10" in said.sentence
    missing = _read(store, overview, str(store))["missing"]
    assert missing[0] == {"what": f"the last `layerscope analyze` did not finish. {said.resume}", "command": None}
    assert said.sentence.endswith(said.resume)
    assert not any(m["what"].startswith("no analysis results yet") for m in missing)


@pytest.mark.parametrize("study", ["profiles", "grids", "scaling", "verdicts", "embedding_map"])
def test_rerunning_an_interrupted_analysis_resumes_and_equals_an_uninterrupted_one(runs, whole, tmp_path, study):
    store = _copy(runs, tmp_path)
    stopped_analysis(store, study, **CHEAP)
    out = analyze_store(store, log=quiet, **CHEAP)
    finished = STUDY_ORDER[:STUDY_ORDER.index(study)]
    # the studies finished before the interruption are reused, not computed again
    recomputed = {"verdict" if s == "verdicts" else s for s in out["computed_by_study"]}
    assert not recomputed & set(finished), out["computed_by_study"]
    assert result_tables(store) == result_tables(whole)
    assert _read(store, current_rows) == _read(whole, current_rows)
    assert _read(store, unfinished_analysis, str(store)) is None
    assert _read(store, last_analysis.read).state == "finished"


def test_a_reanalysis_interrupted_keeps_showing_the_previous_complete_analysis(whole, tmp_path):
    store = _copy(whole, tmp_path)
    stopped_analysis(store, "grids", **{**CHEAP, "k": 4})
    run = _read(store, last_analysis.read)
    assert run.kept == ("toy",) and run.finished == {"toy": ["profiles"]}
    # every view reads the k = 3 analysis, whole: the k = 4 profiles it finished are not mixed in
    assert _read(store, current_rows) == _read(whole, current_rows)
    assert _read(store, dataset_context, "toy")["k"] == 3
    assert _read(store, verdicts, "toy")
    said = _read(store, unfinished_analysis, str(store))
    assert "interrupted during grids of dataset toy" in said.sentence
    assert "previous complete analysis" in said.sentence
    assert "(k=4)" in said.sentence and "(k=3)" in said.sentence and said.command is None


def test_the_plain_command_is_named_when_the_store_saved_the_settings_it_used(whole, tmp_path):
    store = _copy(whole, tmp_path)
    stopped_analysis(store, "verdicts")  # the store's own settings
    said = _read(store, unfinished_analysis, str(store))
    assert said.command == f"layerscope analyze --store {store}"
    assert f"Run `{said.command}` again to finish it" in said.sentence
    assert main(["analyze", "--store", str(store), "--quiet"]) == 0
    assert result_tables(store) == result_tables(whole)
    assert _read(store, unfinished_analysis, str(store)) is None


def test_a_resumed_analysis_interrupted_again_shows_only_the_studies_it_finished(runs, whole, tmp_path):
    """The first interruption's partial rows are no complete analysis to keep: the second analysis
    shows what it has finished itself, and never calls the first one complete."""
    store = _copy(runs, tmp_path)
    stopped_analysis(store, "scaling", **CHEAP)
    stopped_analysis(store, "model_map", **CHEAP)
    run = _read(store, last_analysis.read)
    assert run.kept == () and run.finished == {"toy": ["profiles", "grids", "probes", "scaling"]}
    assert _read(store, current_rows) == _read(whole, rows_of_studies, ("profiles", "grids", "probes", "scaling"))
    said = _read(store, unfinished_analysis, str(store)).sentence
    assert "studies it completed (profiles, grids, probes, scaling)" in said and "previous" not in said


def test_a_failed_analysis_says_it_failed_and_why(runs, tmp_path):
    store = _copy(runs, tmp_path)
    stopped_analysis(store, "layer_choice", RuntimeError("disk on fire"), **CHEAP)
    run = _read(store, last_analysis.read)
    assert (run.state, run.study, run.error) == ("failed", "layer_choice", "disk on fire")
    said = _read(store, unfinished_analysis, str(store)).sentence
    assert "failed during layer choice of dataset toy" in said and "(disk on fire)" in said


def test_the_report_says_the_analysis_did_not_finish_then_not_after_it_has(runs, tmp_path, capsys):
    store = _copy(runs, tmp_path)
    stopped_analysis(store, "scaling", **CHEAP)
    capsys.readouterr()
    _, data, html = make_report(store, tmp_path)
    said = _read(store, unfinished_analysis, str(store)).sentence
    assert data["unfinished"] == said
    assert "Analysis unfinished." in html and "interrupted during scaling of dataset toy" in html
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.splitlines()[4].startswith("**Analysis unfinished.**") and "interrupted during scaling" in markdown
    assert "note: The last `layerscope analyze`" in capsys.readouterr().err
    analyze_store(store, log=quiet, **CHEAP)
    _, data, html = make_report(store, tmp_path)
    assert data["unfinished"] is None and "Analysis unfinished." not in html


def test_rows_of_an_analysis_that_recorded_nothing_are_said_to_be_unfinished(whole, tmp_path):
    """A store interrupted before analyses recorded their state: result rows that no analysis listed
    are an analysis that stopped, and the Overview says so rather than "no results yet"."""
    store = _copy(whole, tmp_path)
    con = duckdb.connect(str(store))
    try:
        con.execute(f"DELETE FROM meta WHERE key = '{last_analysis.KEY}'")
        con.execute("DELETE FROM result_current")
        said = unfinished_analysis(con, str(store))
        assert "did not finish" in said.sentence and "dataset(s) toy" in said.sentence
        assert said.command == f"layerscope analyze --store {store}"
        con.execute("DELETE FROM result_grids; DELETE FROM result_profiles; DELETE FROM result_studies")
        assert unfinished_analysis(con, str(store)) is None  # nothing stored: nothing unfinished
    finally:
        con.close()


# ------------------------------------------------------------------- the real signals, in a subprocess
#: ``layerscope analyze`` whose scaling study runs DuckDB queries until it is stopped: a signal sent
#: after the line ``held`` mostly lands inside DuckDB, as Ctrl-C does during a query. (Each query is
#: bounded: DuckDB looks for the interruption between its tasks, and one endless scan may never end
#: one.)
HELD = """
import signal
import sys
# Ctrl-C as a terminal's Python gets it: a test runner's worker may pass on SIGINT ignored or blocked
# (both survive exec), and twice in a full parallel run no SIGINT ever ended this process
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (likewise: an ignored SIGTERM survives exec)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
from analysis import studies
from precompute.cli import main

def held(ctx, d, pairs):
    print("held", file=sys.stderr, flush=True)
    while True:
        ctx.con.execute("SELECT count(*) FROM range(300000000)").fetchall()

studies.scaling.run = held
sys.exit(main(sys.argv[1:]))
"""


def _held_analysis(store, sig):
    """Run :data:`HELD` on ``store``, send ``sig`` once it is in the held study; (exit code, stderr).

    If the first SIGINT has not ended it within 5 s, it is sent again (a user presses Ctrl-C
    again), every 5 s, up to 6 times."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", HELD, "analyze", "--store", str(store), "--quiet", *CHEAP_FLAGS],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    try:
        head = []
        for line in proc.stderr:
            head.append(line)
            if line.strip() == "held":
                time.sleep(0.3)  # into a query
                proc.send_signal(sig)
                break
        for _ in range(6):
            try:
                _, rest = proc.communicate(timeout=5)
                break
            except subprocess.TimeoutExpired:
                proc.send_signal(sig)
        else:
            _, rest = proc.communicate(timeout=30)
        return proc.returncode, "".join(head) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_ctrl_c_during_a_query_ends_analyze_as_interrupted_without_a_traceback(runs, whole, tmp_path):
    store = _copy(runs, tmp_path)
    rc, err = _held_analysis(store, signal.SIGINT)
    assert rc == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("interrupted;"), err
    run = _read(store, last_analysis.read)
    assert (run.state, run.study) == ("interrupted", "scaling")
    assert "interrupted during scaling of dataset toy" in _read(store, unfinished_analysis, str(store)).sentence
    assert main(["analyze", "--store", str(store), "--quiet", *CHEAP_FLAGS]) == 0
    assert result_tables(store) == result_tables(whole)


def test_sigterm_ends_analyze_as_cancelled_with_143_keeping_the_finished_studies(runs, whole, tmp_path):
    """SIGTERM (the dashboard's Cancel sends it to the job's process group, as ``kill`` does) ends the
    analysis as Ctrl-C does, recorded as its own state: the studies it finished are shown, whole,
    and a rerun resumes to what an uninterrupted analysis stores."""
    store = _copy(runs, tmp_path)
    rc, err = _held_analysis(store, signal.SIGTERM)
    assert rc == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("terminated (SIGTERM);"), err
    run = _read(store, last_analysis.read)
    assert (run.state, run.dataset, run.study) == ("terminated", "toy", "scaling") and run.ended is not None
    assert run.finished == {"toy": ["profiles", "grids", "probes"]}
    assert _read(store, current_rows) == _read(whole, rows_of_studies, ("profiles", "grids", "probes"))
    said = _read(store, unfinished_analysis, str(store)).sentence
    assert "it was cancelled (SIGTERM" in said and "during scaling of dataset toy at" in said, said
    assert "without recording an end" not in said and "studies it completed (profiles, grids, probes)" in said
    assert main(["analyze", "--store", str(store), "--quiet", *CHEAP_FLAGS]) == 0
    assert result_tables(store) == result_tables(whole)
    assert _read(store, current_rows) == _read(whole, current_rows)
    assert _read(store, unfinished_analysis, str(store)) is None


def test_a_killed_analysis_is_said_to_have_stopped_without_an_end(runs, whole, tmp_path):
    store = _copy(runs, tmp_path)
    rc, _ = _held_analysis(store, signal.SIGKILL)
    assert rc == -signal.SIGKILL
    run = _read(store, last_analysis.read)
    assert (run.state, run.study, run.ended) == ("running", "scaling", None)
    said = _read(store, unfinished_analysis, str(store)).sentence
    assert "stopped during scaling of dataset toy without recording an end" in said
    assert "studies it completed (profiles, grids, probes)" in said
    assert main(["analyze", "--store", str(store), "--quiet", *CHEAP_FLAGS]) == 0
    assert result_tables(store) == result_tables(whole)


def test_duckdbs_own_interruptions_count_as_the_user_stopping_the_command(monkeypatch, runs, tmp_path, capsys):
    """DuckDB raises ``RuntimeError("Query interrupted")`` for a SIGINT during a query (and
    ``InterruptException`` for ``con.interrupt()``): the command ends as interrupted, not with a
    traceback."""
    from analysis import studies

    assert is_interrupt(KeyboardInterrupt()) and is_interrupt(RuntimeError("Query interrupted"))
    assert not is_interrupt(RuntimeError("something else")) and not is_interrupt(ValueError("Query interrupted"))
    con = duckdb.connect()
    try:
        import threading

        threading.Timer(0.2, con.interrupt).start()
        with pytest.raises(duckdb.Error) as got:
            con.execute("SELECT count(*) FROM range(1000000000000000)").fetchall()
        assert is_interrupt(got.value)
    finally:
        con.close()

    def interrupted(*args, **kwargs):
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(studies, "analyze_store", interrupted)
    assert main(["analyze", "--store", str(_copy(runs, tmp_path))]) == 130
    assert capsys.readouterr().err.strip().startswith("interrupted;")
