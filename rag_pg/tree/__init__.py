"""Summary trees: the document hierarchy, sidecar files, summaries, prompt context and the LLM client."""
