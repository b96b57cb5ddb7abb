-- Vectors reused by ingest: a chunk whose embedded text is unchanged keeps its vector.

-- name: reuse_vectors
-- For each (content hash, section, title) asked for (the three parts of the text a chunk
-- sends to the model), one stored vector of the model from any chunk of the collection
-- that has the same; keys without one are absent. i is the key's 1-based position. Only
-- chunks numbered above %(after)s count (a --full run reuses only what it wrote itself).
-- A document that `ragpg check --repair` marked gives nothing: its vectors are suspect (a
-- zeroed or foreign vector must be embedded again, not copied on).
SELECT DISTINCT ON (k.i) k.i, v.embedding
FROM unnest(%(hashes)s::text[], %(sections)s::text[], %(titles)s::text[])
     WITH ORDINALITY AS k (content_hash, section, title, i)
JOIN {schema}.chunk c
  ON c.collection = %(collection)s AND c.content_hash = k.content_hash AND c.section = k.section
 AND c.id > %(after)s
JOIN {schema}.document d
  ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key AND d.title = k.title
 AND d.fingerprint <> 'needs-repair'
JOIN {schema}.chunk_vector v
  ON v.chunk_id = c.id AND v.collection = c.collection AND v.shard_key = c.shard_key AND v.model = %(model)s
ORDER BY k.i, c.id;

-- name: reuse_chunk_watermark
-- The highest chunk id so far: every chunk written after this reads has a higher one.
SELECT COALESCE(max(id), 0) FROM {schema}.chunk;
