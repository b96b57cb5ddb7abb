"""Each document, chunk and vector carries its document's shard key, a hash of its path.

A Citus cluster can then spread one collection's documents over every worker
(``database.distribution = document``, rag_pg/store/distribution.py): its tables are
distributed on ``shard_key``, and every key and join that keeps a document with its chunks and
vectors names it, so that a document, its chunks and their vectors share one shard.

* ``document.shard_key`` is the first 32 bits of the path's MD5, as a signed integer (a CHECK
  keeps it so: the unique key (collection, path, shard_key) is the path's uniqueness);
  ``chunk.shard_key`` and ``chunk_vector.shard_key`` are their document's (the foreign keys
  include it).
* Every primary, unique and foreign key of the three tables includes it.
* The view ``chunks_v`` and ``keyword_search()`` join on it too; ``keyword_search()`` also
  carries a chunk's text search configuration as its position in the query's configurations,
  never as a ``regconfig`` value between its steps (on a cluster an intermediate result
  travels in binary, where a ``regconfig`` is the sending node's object id).

On one server, or a cluster distributed by collection, nothing else changes: every lookup the
old keys served is a prefix of the new ones.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from psycopg import sql

from rag_pg.migrations import ddl

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# The SQL twin of rag_pg.store.records.shard_key.
SHARD_KEY = "('x' || left(md5({column}), 8))::bit(32)::integer"

UPGRADE = """
ALTER TABLE {s}.chunk_vector DROP CONSTRAINT chunk_vector_chunk_fkey;
ALTER TABLE {s}.chunk DROP CONSTRAINT chunk_document_fkey;

ALTER TABLE {s}.document ADD COLUMN shard_key integer;
UPDATE {s}.document SET shard_key = {path_key};
ALTER TABLE {s}.document ALTER COLUMN shard_key SET NOT NULL;
ALTER TABLE {s}.document ADD CONSTRAINT document_shard_key_check CHECK (shard_key = {path_key});
COMMENT ON COLUMN {s}.document.shard_key IS
    'A hash of the path (its MD5''s first 32 bits): where a cluster places the document.';

ALTER TABLE {s}.chunk ADD COLUMN shard_key integer;
UPDATE {s}.chunk c SET shard_key = d.shard_key
FROM {s}.document d WHERE d.id = c.document_id AND d.collection = c.collection;
ALTER TABLE {s}.chunk ALTER COLUMN shard_key SET NOT NULL;
COMMENT ON COLUMN {s}.chunk.shard_key IS 'Its document''s shard key.';

ALTER TABLE {s}.chunk_vector ADD COLUMN shard_key integer;
UPDATE {s}.chunk_vector v SET shard_key = c.shard_key
FROM {s}.chunk c WHERE c.id = v.chunk_id AND c.collection = v.collection;
ALTER TABLE {s}.chunk_vector ALTER COLUMN shard_key SET NOT NULL;
COMMENT ON COLUMN {s}.chunk_vector.shard_key IS 'Its chunk''s shard key.';

ALTER TABLE {s}.document DROP CONSTRAINT document_pkey;
ALTER TABLE {s}.document ADD CONSTRAINT document_pkey PRIMARY KEY (id, collection, shard_key);
ALTER TABLE {s}.document DROP CONSTRAINT document_collection_path_key;
ALTER TABLE {s}.document
    ADD CONSTRAINT document_collection_path_key UNIQUE (collection, path, shard_key);
ALTER TABLE {s}.chunk DROP CONSTRAINT chunk_pkey;
ALTER TABLE {s}.chunk ADD CONSTRAINT chunk_pkey PRIMARY KEY (id, collection, shard_key);
ALTER TABLE {s}.chunk DROP CONSTRAINT chunk_document_position_key;
ALTER TABLE {s}.chunk ADD CONSTRAINT chunk_document_position_key
    UNIQUE (document_id, position, collection, shard_key);
ALTER TABLE {s}.chunk ADD CONSTRAINT chunk_document_fkey FOREIGN KEY (document_id, collection, shard_key)
    REFERENCES {s}.document (id, collection, shard_key) ON DELETE CASCADE;
ALTER TABLE {s}.chunk_vector DROP CONSTRAINT chunk_vector_pkey;
ALTER TABLE {s}.chunk_vector
    ADD CONSTRAINT chunk_vector_pkey PRIMARY KEY (chunk_id, model, collection, shard_key);
ALTER TABLE {s}.chunk_vector ADD CONSTRAINT chunk_vector_chunk_fkey
    FOREIGN KEY (chunk_id, collection, shard_key)
    REFERENCES {s}.chunk (id, collection, shard_key) ON DELETE CASCADE;

CREATE OR REPLACE VIEW {s}.chunks_v AS
SELECT c.id AS chunk_id, c.document_id, d.collection, d.path, d.title, c.section, c.anchor,
       CASE WHEN c.anchor = '' THEN d.path ELSE d.path || '#' || c.anchor END AS citation,
       c.position, c.content, c.token_count, c.content_hash, d.language,
       EXISTS (SELECT 1 FROM {s}.chunk_vector v
               WHERE v.chunk_id = c.id AND v.collection = c.collection
                 AND v.shard_key = c.shard_key) AS has_vector,
       d.indexed_at
FROM {s}.chunk c
JOIN {s}.document d
  ON d.id = c.document_id AND d.collection = c.collection AND d.shard_key = c.shard_key;
"""

DOWNGRADE = """
ALTER TABLE {s}.chunk_vector DROP CONSTRAINT chunk_vector_chunk_fkey;
ALTER TABLE {s}.chunk_vector DROP CONSTRAINT chunk_vector_pkey;
ALTER TABLE {s}.chunk_vector ADD CONSTRAINT chunk_vector_pkey PRIMARY KEY (chunk_id, model, collection);
ALTER TABLE {s}.chunk DROP CONSTRAINT chunk_document_fkey;
ALTER TABLE {s}.chunk DROP CONSTRAINT chunk_pkey;
ALTER TABLE {s}.chunk ADD CONSTRAINT chunk_pkey PRIMARY KEY (id, collection);
ALTER TABLE {s}.chunk DROP CONSTRAINT chunk_document_position_key;
ALTER TABLE {s}.chunk ADD CONSTRAINT chunk_document_position_key
    UNIQUE (document_id, position, collection);
ALTER TABLE {s}.document DROP CONSTRAINT document_pkey;
ALTER TABLE {s}.document ADD CONSTRAINT document_pkey PRIMARY KEY (id, collection);
ALTER TABLE {s}.document DROP CONSTRAINT document_collection_path_key;
ALTER TABLE {s}.document ADD CONSTRAINT document_collection_path_key UNIQUE (collection, path);
ALTER TABLE {s}.chunk ADD CONSTRAINT chunk_document_fkey FOREIGN KEY (document_id, collection)
    REFERENCES {s}.document (id, collection) ON DELETE CASCADE;
ALTER TABLE {s}.chunk_vector ADD CONSTRAINT chunk_vector_chunk_fkey
    FOREIGN KEY (chunk_id, collection) REFERENCES {s}.chunk (id, collection) ON DELETE CASCADE;
ALTER TABLE {s}.chunk_vector DROP COLUMN shard_key;
ALTER TABLE {s}.chunk DROP COLUMN shard_key;
ALTER TABLE {s}.document DROP CONSTRAINT document_shard_key_check;
ALTER TABLE {s}.document DROP COLUMN shard_key;
"""

# keyword_search() as 0008 left it, with the shard key in its join and each chunk's
# configuration carried as its position (see the module).
KEYWORD_SEARCH_CHANGES = (
    # the question's two forms read from joined aggregates, not from scalar subqueries of a
    # row without a FROM (which Citus, planning the steps apart, evaluates to NULL)
    ("""    SELECT (SELECT string_agg(t.word, ' ' ORDER BY t.n)
            FROM tokens t JOIN distinct_words w ON w.lw = lower(t.word)) AS kw_text,
           (SELECT string_agg('"' || w.word || '"', ' or ' ORDER BY w.n)
            FROM distinct_words w) AS kwq
    WHERE coalesce(keyword_search.k, 0) > 0""",
     """    SELECT a.kw_text, b.kwq
    FROM (SELECT string_agg(t.word, ' ' ORDER BY t.n) AS kw_text
          FROM tokens t JOIN distinct_words w ON w.lw = lower(t.word)) a
    CROSS JOIN (SELECT string_agg('"' || w.word || '"', ' or ' ORDER BY w.n) AS kwq
                FROM distinct_words w) b
    WHERE coalesce(keyword_search.k, 0) > 0"""),
    ("""    SELECT t.cfg, t.language, u.lexeme, cardinality(u.positions) AS qtf
    FROM q
    CROSS JOIN unnest(ARRAY[{fr}, {en}, {si}]::regconfig[], ARRAY['french', 'english', 'simple'])
         AS t(cfg, language)
    CROSS JOIN LATERAL unnest(to_tsvector(t.cfg, q.kw_text)) AS u""",
     """    SELECT t.cfg, t.language, u.lexeme, cardinality(u.positions) AS qtf
    FROM q
    CROSS JOIN unnest(ARRAY[{fr}, {en}, {si}]::regconfig[], ARRAY['french', 'english', 'simple'])
         WITH ORDINALITY AS t(config, language, cfg)
    CROSS JOIN LATERAL unnest(to_tsvector(t.config, q.kw_text)) AS u"""),
    ("    SELECT c.id AS chunk_id, c.ts_config, c.token_count AS dl, m.lexeme,",
     "    SELECT c.id AS chunk_id,\n"
     "           array_position(ARRAY[{fr}, {en}, {si}]::regconfig[], c.ts_config) AS ts_config,\n"
     "           c.token_count AS dl, m.lexeme,"),
    ("JOIN {s}.document d ON d.id = c.document_id AND d.collection = c.collection\n",
     "JOIN {s}.document d\n  ON d.id = c.document_id AND d.collection = c.collection"
     " AND d.shard_key = c.shard_key\n"),
)


def keyword_search(body: str) -> str:
    for old, new in KEYWORD_SEARCH_CHANGES:
        assert body.count(old) == 1, old
        body = body.replace(old, new)
    return body


def _run_keyword_search(schema: str, changed: bool) -> None:
    bm25 = ddl.revision_module("0006_keyword_search_bm25.py")
    body = ddl.revision_module("0008_term_stats.py")._ordered_sum(bm25.KEYWORD_SEARCH)
    ddl.run(keyword_search(body) if changed else body, schema, sep=sql.Literal(bm25.SEPARATORS),
            **bm25._configs(schema))


def _run_each(template: str, schema: str, **parts: sql.Composable) -> None:
    """One statement at a time: on a Citus coordinator a distributed table's DDL is sent to
    its shards statement by statement."""
    for statement in template.split(";\n"):
        if statement.strip():
            ddl.run(statement, schema, **parts)


def upgrade(schema: str = "ragpg") -> None:
    _run_each(UPGRADE, schema, path_key=sql.SQL(SHARD_KEY.format(column="path")))
    _run_keyword_search(schema, changed=True)


def downgrade(schema: str = "ragpg") -> None:
    _run_keyword_search(schema, changed=False)
    views = ddl.revision_module("0011_colocated_views.py").UPGRADE
    ddl.run(views[:views.index("CREATE OR REPLACE VIEW {s}.corpus_stats_v")], schema)
    _run_each(DOWNGRADE, schema)
