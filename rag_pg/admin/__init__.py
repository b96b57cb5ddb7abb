"""Administration of an index: invariant checks, SQL roles, re-embedding, retrieval evaluation."""
