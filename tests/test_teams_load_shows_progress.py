"""`python -m lib teams` on a large file says how far it is (the progress bar, on a terminal or with
--progress): it climbs through the teams and then the snapshots to 100%, and the load is whole."""
from __future__ import annotations

import re

from bench.bench_large_site_start import TEAM
from tests.fixtures_ledger import query, run_cli

N = 150


def test_a_large_teams_file_shows_its_progress_to_the_end(tmp_path):
    text = "[defaults]\nmax_gpu_mem_gb = 80\nmax_runtime_hours = 48\npilot_required_above_gpu_hours = 1000\n"
    text += "".join(TEAM.format(i=i) for i in range(N))
    text += "".join(f'\n[[snapshots]]\nsnapshot = "s{i:04d}"\nteam = "t{i:04d}"\n' for i in range(N))
    (tmp_path / "teams.toml").write_text(text, encoding="utf-8")
    db = tmp_path / "gate.duckdb"
    out = run_cli("--db", db, "--progress", "teams", "--file", tmp_path / "teams.toml", timeout=300)
    assert out.returncode == 0, out.stderr
    shown = [float(p) for p in re.findall(r"\]\s+([0-9.]+)%", out.stderr)]
    assert len(shown) > 10 and shown == sorted(shown) and shown[-1] == 100.0
    assert "team 1 of 150" in out.stderr and re.search(rf"snapshot [0-9]+ of {N}", out.stderr)
    assert f"{N} teams and {N} snapshots written" in out.stderr
    assert query(db, "SELECT count(*) FROM teams") == [(N,)]
    plain = run_cli("--db", db, "teams", "--file", tmp_path / "teams.toml")   # not a terminal: no bar
    assert plain.returncode == 0 and "%" not in plain.stderr
