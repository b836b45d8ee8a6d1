

def test_sqlite_waits_for_the_write_lock_in_attempts_and_an_interrupt_ends_the_wait(
        tmp_path: Path) -> None:
    """A SQLite write waits for another process's write lock `busy_timeout` in all (in
    short attempts) and then fails with "database is locked"; an interrupt from another
    thread ends a longer wait after the attempt in progress (SQLite's own wait ignores
    ``Connection.interrupt()``)."""
    path = str(tmp_path / "jobs.db")
    quick, slow = SQLiteScheduleStore(path, busy_timeout=1.0), SQLiteScheduleStore(path)
    try:
        with holding_write_lock(path):
            began = time.monotonic()
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                quick.set_paused("x", True)
            assert 0.9 < time.monotonic() - began < 3.0
            failed: list[BaseException] = []

            def write() -> None:
                try:
                    slow.set_paused("x", True)
                except BaseException as exc:
                    failed.append(exc)

            writer = threading.Thread(target=write)
            writer.start()
            began = time.monotonic()
            slow.interrupt()
            writer.join(10)
            assert not writer.is_alive() and time.monotonic() - began < 2.0
            assert len(failed) == 1 and "locked" in str(failed[0])
    finally:
        quick.close()
        slow.close()
