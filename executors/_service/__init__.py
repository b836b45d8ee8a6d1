"""The machinery behind `executors.service`, one concept a module (nothing is re-exported here).

- `job`: a `Job`, its statistics, its place in the schedule (`JobSlot`) and the bookkeeping of
  one run, written once for shared and dedicated jobs;
- `scheduler`: the scheduler thread, its deadline heap and its named control messages;
- `pool`: the bounded worker pool the scheduler hands due runs to;
- `wallclock`: wall-clock schedules on the monotonic heap: fire times, clock jumps and
  suspends, missed runs;
- `events`: the typed events and the dispatcher thread that delivers them;
- `run_info`: `RunInfo` and `current_run()`;
- `options`: the checked arguments of `every`, `schedule` and `cron`;
- `status` and `shutdown`: the snapshots, and the one-deadline shutdown with its report.
- `store_calls` and `stored_faults`: a store's calls in progress (a hung one reported and
  interrupted at the shutdown deadline), its own runs written before a claim settles expired
  leases, and the store loop's end.

Threaded core: no asyncio here (tests/test_imports.py checks it).
"""
