"""The queue bench's simulation (bench/bench_queue.py) on a tiny synthetic stream: the kept queue takes one
submission per run, starts every request, never holds more than the quota at once (while the stream
contends enough that some requests wait), and its cheap lay-out starts every run when the whole line
laid out at every event does."""
from __future__ import annotations

from bench.bench_queue import kept_queue, synthetic_stream


def test_kept_queue_one_submission_per_run_and_never_over_the_quota():
    jobs, policies = synthetic_stream(30, seed=3)
    sim = kept_queue(jobs, policies["synth"])
    assert set(sim.started) == {j["id"] for j in jobs} and set(sim.tries.values()) == {1}
    assert sim.overbooked == 0 and sim.peak <= sim.quota
    assert any(sim.started[j["id"]] > j["arrive"] for j in jobs)   # the line was used, not only empty
    assert kept_queue(jobs, policies["synth"], whole_line=True).started == sim.started
