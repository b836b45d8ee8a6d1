"""The machinery behind `executors.service`, one concept a module (nothing is re-exported here).

- `job`: a `Job`, its statistics, its place in the schedule (`JobSlot`) and the bookkeeping of
  one run, written once for shared and dedicated jobs;
- `scheduler`: the scheduler thread, its deadline heap and its named control messages;
- `pool`: the bounded worker pool the scheduler hands due runs to.

Threaded core: no asyncio here (tests/test_imports.py checks it).
"""
