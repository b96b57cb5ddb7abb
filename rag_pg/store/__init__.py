"""Everything that speaks SQL: connections and snapshots, writes, reads, runs, statistics, indexes, locks, tenancy, replicas, migrations, the embedded server."""
