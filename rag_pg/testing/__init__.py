"""Test helpers shipped with ragpg, for its own suite, benchmarks and users' CI.

``FakeEmbedder`` embeds in process (``RagPG(url, provider=FakeEmbedder())``);
``embedserver``, ``chatserver`` and ``rerankserver`` are fake services on loopback;
``faults`` kills, stalls or fails a process at a named checkpoint of the write paths.
Nothing here is imported by the library itself.
"""

from rag_pg.testing.fake_embedder import FakeEmbedder

__all__ = ["FakeEmbedder"]
