"""Benchmarks: ours and the peers side by side, in one process run, interleaved."""
