"""Test helpers shipped with ragpg, for its own suite, benchmarks and users' CI."""
