SELECT set_config('hnsw.ef_search', %(ef_search)s, true),
       set_config('hnsw.iterative_scan', %(iterative_scan)s, true),
       set_config('hnsw.max_scan_tuples', %(max_scan_tuples)s, true),
       set_config('enable_seqscan', %(enable_seqscan)s, true),
       set_config('max_parallel_workers_per_gather', '0', true)
