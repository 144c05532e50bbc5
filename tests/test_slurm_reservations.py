"""Reading the cluster's capacity from Slurm's own text: sinfo's nodes and GPUs, scontrol's
reservations as capacity windows, and the [pools] tables proposed from them. The text is what the
test cluster printed (tests/fixtures_slurm_output.py), plus odd and hostile variants; the commands
themselves are run when they are missing, failing or slow (stand-ins on PATH, not Slurm)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.ledger.cluster_windows import window_problem
from lib.slurm.reservations import (SlurmUnavailable, capacity_by_type, pools_toml, expand_hostlist, gres_gpus,
                                    parse_nodes, parse_reservations, read_reservations, slurm_time, tres_gpus)
from tests.fixtures_slurm import REPO
from tests.fixtures_slurm_output import (MAINT1_KOLKATA, NO_RESERVATIONS, RESERVATIONS, RESERVATIONS_MULTILINE,
                                         SINFO)

PREEMPTIBLE = {"spot", "spot-a10", "spot-h100"}   # data/teams.toml's preemptible partitions
UTC = timezone.utc


@pytest.fixture(scope="module")
def nodes():
    got, problems = parse_nodes(SINFO)
    assert problems == []
    return got


def by_name(windows) -> dict:
    return {w["name"]: w for w in windows}


# ------------------------------------------------------------------------------ sinfo


def test_a_node_in_two_partitions_is_one_node_with_its_gpus_once(nodes):
    assert list(nodes) == ["localhost"]
    node = nodes["localhost"]
    assert (node["gpus"], node["cores"], node["partitions"]) == (8, 2, ["gpu", "spot"])


def test_the_capacity_per_type_counts_each_node_once_per_type_it_serves():
    text = ("g1|gpu|gpu:a100:4(S:0-1)|64|2|idle\n"      # 32 cores, 4 GPUs, stable only
            "g2|gpu|gpu:8|32|1|mixed\ng2|spot|gpu:8|32|1|mixed\n"   # in both pools
            "s1|spot-a10|gpu:a10:2(S:0),gpu:a10:2(S:1)|16|1|down*\n"  # preemptible only, down
            "c1|cpu|(null)|128|2|idle\n")                # no GPU: no capacity
    nodes, problems = parse_nodes(text)
    assert problems == []
    got = capacity_by_type(nodes, PREEMPTIBLE)
    assert got["stable"] == {"gpus": 4 + 8, "nodes": ["g1", "g2"], "partitions": ["gpu"]}
    assert got["preemptible"] == {"gpus": 8 + 4, "nodes": ["g2", "s1"], "partitions": ["spot", "spot-a10"]}
    proposal = pools_toml(nodes, PREEMPTIBLE, read_at=datetime(2026, 12, 3, 14, 0))
    parsed = tomllib.loads(proposal)
    assert parsed == {"pools": {"stable": {"gpus": 12}, "preemptible": {"gpus": 12}}}
    assert "g2" in proposal and "s1" in proposal  # the shared and the down node are named for the reviewer


def test_the_proposal_for_the_test_cluster_is_its_eight_gpus_in_each_pool(nodes):
    parsed = tomllib.loads(pools_toml(nodes, PREEMPTIBLE, read_at=datetime(2026, 12, 3)))
    assert parsed["pools"] == {"stable": {"gpus": 8}, "preemptible": {"gpus": 8}}
    # a cluster whose teams call no partition preemptible: every GPU is stable, none preemptible
    parsed = tomllib.loads(pools_toml(nodes, [], read_at=datetime(2026, 12, 3)))
    assert parsed["pools"] == {"stable": {"gpus": 8}, "preemptible": {"gpus": 0}}


@pytest.mark.parametrize("gres, gpus", [
    ("gpu:8", 8), ("gpu:a100:4(S:0-1),gpu:v100:2(S:0,1)", 6), ("gpu", 1), ("gpu:tesla", 1),
    ("(null)", 0), ("", 0), ("shard:16,gpu:2", 2), ("mps:100", 0), ("gpu:h100:4(IDX:0-3)", 4)])
def test_gres_counts_gpus_of_every_type_and_nothing_else(gres, gpus):
    assert gres_gpus(gres) == gpus


@pytest.mark.parametrize("gres", ["gpu:a100:four", "gpu:a:b:-1", "gpu:1e3"])
def test_a_gres_count_that_is_not_a_whole_number_is_refused(gres):
    with pytest.raises(ValueError, match="whole number"):
        gres_gpus(gres)


def test_odd_sinfo_lines_are_problems_naming_the_line_and_the_rest_is_kept():
    nodes, problems = parse_nodes("g1|gpu|gpu:4|8|1|idle\nnot sinfo at all\ng2|gpu|gpu:a100:many|8|1|idle\n\n")
    assert nodes["g1"]["gpus"] == 4 and nodes["g2"]["gpus"] == 0
    assert len(problems) == 2
    assert problems[0].startswith("sinfo line 2:") and "gpu:a100:many" in problems[1]


@pytest.mark.parametrize("text, names", [
    ("localhost", ["localhost"]), ("gpu[01-03,07],login", ["gpu01", "gpu02", "gpu03", "gpu07", "login"]),
    ("r[1-2]n[8-9]", ["r1n8", "r1n9", "r2n8", "r2n9"]), ("n[098-101]", ["n098", "n099", "n100", "n101"]), ("", [])])
def test_hostlists_expand_as_slurm_writes_them(text, names):
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("text", ["n[1-", "n]1", "n[a-b]", "n[5-1]", "n[1-99999999999]", "a[1-1000]b[1-1000]"])
def test_a_hostlist_that_is_malformed_or_huge_is_refused_quickly(text):
    t0 = time.monotonic()
    with pytest.raises(ValueError):
        expand_hostlist(text)
    assert time.monotonic() - t0 < 1


# ------------------------------------------------------------------------------ scontrol


def test_the_captured_reservations_become_windows_with_the_gpus_they_hold(nodes):
    windows, problems = parse_reservations(RESERVATIONS, nodes, PREEMPTIBLE, tz=UTC)
    assert problems == []
    w = by_name(windows)
    # maintenance on every node: the node's 8 GPUs (TRES lists only cpu=2), every pool (the node
    # is in a stable and a preemptible partition), only root may run inside
    assert w["maint1"] == {"name": "maint1", "start": datetime(2026, 12, 3, 14, 43, 55),
                           "end": datetime(2026, 12, 3, 15, 43, 55), "gpus": 8, "pool": None,
                           "accounts": [], "users": ["root"]}
    assert (w["acct1"]["pool"], w["acct1"]["accounts"], w["acct1"]["gpus"]) == ("preemptible", ["vision"], 8)
    assert (w["part1"]["pool"], w["part1"]["gpus"]) == ("stable", 8)
    assert w["cores1"]["gpus"] == 4            # 1 of the node's 2 cores: half its GPUs
    assert w["acct2"]["users"] == ["root", "nobody"] and w["excl"]["users"] == ["-nobody"]
    assert w["unl"]["end"] - w["unl"]["start"] == timedelta(days=365)
    assert all(window_problem(x) is None for x in windows)  # every one can be stored in the ledger
    assert [x["start"] for x in windows] == sorted(x["start"] for x in windows)


def test_a_daily_maintenance_repeats_over_the_next_week(nodes):
    windows, _ = parse_reservations(RESERVATIONS, nodes, PREEMPTIBLE, tz=UTC)
    daily = [x for x in windows if x["name"] == "daily1"]
    assert len(daily) == 8                        # the next one and 7 repeats within 7 days of it
    assert all(b["start"] - a["start"] == timedelta(days=1) for a, b in zip(daily, daily[1:]))
    assert all(x["end"] - x["start"] == timedelta(minutes=30) for x in daily)
    weekdays, _ = parse_reservations(RESERVATIONS.replace("MAINT,DAILY", "MAINT,WEEKDAY"), nodes, PREEMPTIBLE, tz=UTC)
    starts = [x["start"] for x in weekdays if x["name"] == "daily1"]
    assert starts and all(s.weekday() < 5 for s in starts) and len(starts) < 8


def test_the_multiline_form_reads_the_same_as_the_oneliner(nodes):
    assert parse_reservations(RESERVATIONS_MULTILINE, nodes, PREEMPTIBLE, tz=UTC) == \
        parse_reservations(RESERVATIONS, nodes, PREEMPTIBLE, tz=UTC)


def test_local_times_are_converted_to_utc_through_the_zone_they_were_printed_in(nodes, monkeypatch):
    utc = by_name(parse_reservations(RESERVATIONS, nodes, PREEMPTIBLE, tz=UTC)[0])["maint1"]
    kolkata = parse_reservations(MAINT1_KOLKATA, nodes, PREEMPTIBLE, tz=ZoneInfo("Asia/Kolkata"))[0]
    assert [(x["start"], x["end"]) for x in kolkata] == [(utc["start"], utc["end"])]
    # without a zone named, this process's local zone (here set to Kolkata's) is the one
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        local = parse_reservations(MAINT1_KOLKATA, nodes, PREEMPTIBLE)[0]
    finally:
        monkeypatch.undo()
        time.tzset()
    assert [(x["start"], x["end"]) for x in local] == [(utc["start"], utc["end"])]


def test_a_dst_change_is_read_in_the_zone_of_the_day():
    berlin = ZoneInfo("Europe/Berlin")
    assert slurm_time("2026-07-01T12:00:00", berlin) == datetime(2026, 7, 1, 10, 0)   # CEST, +02:00
    assert slurm_time("2026-12-01T12:00:00", berlin) == datetime(2026, 12, 1, 11, 0)  # CET, +01:00


def test_no_reservations_is_no_window_and_no_problem(nodes):
    assert parse_reservations(NO_RESERVATIONS, nodes, PREEMPTIBLE) == ([], [])
    assert parse_reservations("", nodes, PREEMPTIBLE) == ([], [])


def test_unknown_fields_nodes_all_and_a_gpu_tres_are_read(nodes):
    text = ("ReservationName=future StartTime=2027-01-01T00:00:00 EndTime=2027-01-01T06:00:00 Nodes=ALL "
            "Flags=MAINT TRES=cpu=4,gres/gpu=3 NewField=whatever Comment=a comment with spaces Users=ops\n"
            "ReservationName=typed StartTime=2027-01-02T00:00:00 EndTime=2027-01-02T01:00:00 Nodes=ALL "
            "PartitionName=spot TRES=cpu=2,gres/gpu:a100=2,gres/gpu:v100=1 Accounts=-vision,-search\n"
            "ReservationName=all StartTime=2027-01-03T00:00:00 EndTime=2027-01-03T01:00:00 Nodes=ALL "
            "PartitionName=(null) TRES=cpu=2\n")
    windows, problems = parse_reservations(text, nodes, PREEMPTIBLE, tz=UTC)
    assert problems == []
    w = by_name(windows)
    assert (w["future"]["gpus"], w["future"]["users"]) == (3, ["ops"])   # TRES names the GPUs: that count
    assert (w["typed"]["gpus"], w["typed"]["pool"]) == (3, "preemptible")
    assert w["typed"]["accounts"] == ["-vision", "-search"]
    assert (w["all"]["gpus"], w["all"]["pool"]) == (8, None)             # Nodes=ALL: every node's GPUs


def test_a_reservation_without_gpus_is_no_window(nodes):
    text = ("ReservationName=lic StartTime=2027-01-01T00:00:00 EndTime=2027-01-01T06:00:00 Nodes=(null) "
            "NodeCnt=0 Licenses=matlab:4 TRES=license/matlab=4\n")
    assert parse_reservations(text, nodes, PREEMPTIBLE, tz=UTC) == ([], [])


@pytest.mark.parametrize("line, said", [
    ("ReservationName=a StartTime=Unknown EndTime=2027-01-01T00:00:00 Nodes=localhost", "StartTime 'Unknown'"),
    ("ReservationName=b StartTime=2027-01-02T00:00:00 EndTime=2027-01-01T00:00:00 Nodes=localhost", "not a span"),
    ("ReservationName=c StartTime=2027-01-01T00:00:00 EndTime=2027-01-01T01:00:00 Nodes=n[1-", "unbalanced"),
    ("ReservationName=d StartTime=2027-01-01T00:00:00 EndTime=2027-01-01T01:00:00 Nodes=localhost CoreCnt=x",
     "CoreCnt 'x'"),
    ("ReservationName= StartTime=2027-01-01T00:00:00 EndTime=2027-01-01T01:00:00 Nodes=localhost", "reservation ''"),
    ("garbage before any reservation", "scontrol line 1: not part of a reservation"),
])
def test_a_reservation_that_cannot_be_read_is_a_problem_and_the_others_are_kept(nodes, line, said):
    good = "ReservationName=ok StartTime=2027-02-01T00:00:00 EndTime=2027-02-01T01:00:00 Nodes=localhost\n"
    windows, problems = parse_reservations(line + "\n" + good, nodes, PREEMPTIBLE, tz=UTC)
    assert [w["name"] for w in windows] == ["ok"]
    assert len(problems) == 1 and said in problems[0], problems


def test_a_node_sinfo_does_not_list_holds_no_gpus_and_is_named(nodes):
    text = "ReservationName=x StartTime=2027-01-01T00:00:00 EndTime=2027-01-01T01:00:00 Nodes=localhost,ghost[1-2]\n"
    windows, problems = parse_reservations(text, nodes, PREEMPTIBLE, tz=UTC)
    assert windows[0]["gpus"] == 8
    assert problems == ["reservation 'x': node(s) sinfo does not list, counted without GPUs: ghost1, ghost2"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.text(max_size=80),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["ReservationName", "StartTime", "EndTime", "Nodes",
                                                         "Flags", "TRES", "CoreCnt", "PartitionName", "Users"]),
              st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)),
    st.sampled_from(RESERVATIONS.splitlines())), max_size=8).map(" ".join),
    st.sampled_from(["\n", " ", "\n   "]))
def test_any_text_from_scontrol_gives_storable_windows_or_problems_never_a_crash(nodes, text, sep):
    windows, problems = parse_reservations(text.replace(" ", sep, 3), nodes, PREEMPTIBLE, tz=UTC)
    assert all(window_problem(w) is None for w in windows)
    assert all(isinstance(p, str) for p in problems)


def test_tres_without_gpus_is_none_and_with_gpus_their_count():
    assert tres_gpus("cpu=2") is None and tres_gpus("(null)") is None
    assert tres_gpus("cpu=2,gres/gpu=4,gres/gpu:a100=4") == 4


# ------------------------------------------------------------------------------ running the commands


def stand_in(tmp_path, name: str, body: str):
    """An executable `name` in a fresh folder: a stand-in for a Slurm command that fails or hangs."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    exe = folder / name
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return folder


def test_scontrol_missing_failing_or_silent_is_slurm_unavailable(tmp_path, monkeypatch):
    sleep = shutil.which("sleep")
    monkeypatch.setenv("PATH", str(tmp_path))   # nothing there
    with pytest.raises(SlurmUnavailable, match="scontrol is not installed"):
        read_reservations()
    monkeypatch.setenv("PATH", str(stand_in(tmp_path, "scontrol", "echo 'slurm_load_reservations error: "
                                            "Unable to contact slurm controller' >&2; exit 1")))
    with pytest.raises(SlurmUnavailable, match="exited 1: slurm_load_reservations error: Unable to contact"):
        read_reservations()
    monkeypatch.setenv("PATH", str(stand_in(tmp_path, "scontrol", f"exec {sleep} 30")))
    t0 = time.monotonic()
    with pytest.raises(SlurmUnavailable, match="no answer within 0.5 s"):
        read_reservations(timeout_s=0.5)
    assert time.monotonic() - t0 < 5


def test_the_commands_run_in_utc_whatever_the_callers_zone(tmp_path, monkeypatch):
    folder = stand_in(tmp_path, "scontrol", 'echo "TZ=$TZ FORMAT=$SLURM_TIME_FORMAT"')
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setenv("TZ", "America/New_York")
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    assert read_reservations().strip() == "TZ=UTC0 FORMAT=standard"


def test_the_command_line_says_when_slurm_does_not_answer_and_writes_nothing(tmp_path):
    db = tmp_path / "gate.duckdb"
    env = {**os.environ, "PATH": f"{stand_in(tmp_path, 'sinfo', 'exit 1')}:{os.path.dirname(sys.executable)}",
           "PYTHONPATH": str(REPO)}
    for args, said in ((["slurm", "windows", "--sync"], "slurm windows: cannot read the cluster's reservations"),
                       (["teams", "--from-slurm"], "teams --from-slurm: cannot read the cluster's nodes")):
        p = subprocess.run([sys.executable, "-m", "lib", "--db", str(db), *args], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 3 and said in p.stderr and "exited 1" in p.stderr and p.stdout == "", p.stderr
    assert not db.exists()  # --sync on a missing ledger made none
