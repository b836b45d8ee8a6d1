"""The stored workload's floor (`benchmarks._stored_serve.serve_floor`): the bare claim and
completion ours is built on, served by two real processes from one PostgreSQL table, runs each
fire time of the window once, so the benchmark's floor rows read real runs."""

from __future__ import annotations

import pytest


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_floor_runs_each_fire_time_once_from_two_processes(pg_dsn: str) -> None:
    from benchmarks import _stored_workload as w

    workload = w.Workload("W1", 5, True)
    config = next(c for c in w.CONFIGS if c.store == "postgresql" and c.processes == 2)
    outcome = w.run(w.FLOOR, workload, config, pg_dsn, w.Timing(0.5, 1.5, 3.0))
    assert outcome.processes == 2 and outcome.duplicates == 0, outcome
    assert outcome.due >= 5 and outcome.done == outcome.due, outcome
    assert outcome.server_cpu_us is not None and outcome.client_cpu_us >= 0, outcome
