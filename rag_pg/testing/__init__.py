"""Test helpers shipped with ragpg, for its own suite, benchmarks and users' CI.

``embedserver``, ``chatserver`` and ``rerankserver`` are fake services on loopback;
``faults`` kills, stalls or fails a process at a named checkpoint of the write paths.
Nothing here is imported by the library itself.
"""
