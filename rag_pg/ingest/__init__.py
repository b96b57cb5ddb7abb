"""One ingest run: walk and prepare, embed in groups (reusing unchanged vectors), write each document atomically."""
