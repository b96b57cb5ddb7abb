"""A question -> hits: plan, statement, BM25, fusion, shaping, rerank, locate."""
