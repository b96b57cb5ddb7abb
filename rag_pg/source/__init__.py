"""Files -> documents -> chunks, pure: walk, rules, confined read, front matter, language, parse, chunk, token window; Markdown and conversion."""
