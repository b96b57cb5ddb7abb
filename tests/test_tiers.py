"""The tier sorter itself: it must see a process started directly, through a helper, through a
fixture of the module, and leave an in-process test alone."""

from __future__ import annotations

from pathlib import Path

from .tiers import process_functions, starts_processes

SAMPLE = '''
import subprocess

def helper():
    return subprocess.run(["true"])

def indirect():
    return helper()

def fixture_starting():
    return run_cli(["stats"])

def test_direct():
    run_cli(["--help"])

def test_through_helpers():
    indirect()

def test_with_fixture(fixture_starting):
    pass

def test_in_process():
    assert 1 + 1 == 2
'''


def test_the_sorter_follows_helpers_and_fixtures(tmp_path: Path):
    path = tmp_path / "test_sample.py"
    path.write_text(SAMPLE)
    assert process_functions(path) == {"helper", "indirect", "fixture_starting", "test_direct",
                                       "test_through_helpers"}
    assert starts_processes(path, "test_with_fixture", ["fixture_starting", "tmp_path"])
    assert not starts_processes(path, "test_in_process", ["tmp_path"])


def test_the_suite_is_sorted_both_ways():
    here = Path(__file__).parent
    assert starts_processes(here / "test_cli.py", "test_ingest_search_stats_json", ["db_url"])
    assert not starts_processes(here / "test_fuse.py", "test_rrf_agrees_with_a_naive_reference", [])
