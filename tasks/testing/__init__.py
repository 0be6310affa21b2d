"""Test doubles for tests, the demo and the benches. No module under tasks/lm, tasks/metrics or
tasks/stages imports them: the flows register the demo's servers with the layers below
(`demo.register_doubles`), and tests import them directly.

    demo                registers "served:<model>" base URLs and the "synthetic" venue source
    openreview_server   a local OpenReview-compatible HTTP server (API v1 and v2) serving venues
    anthropic_server    a local Anthropic-compatible server (Messages and Message Batches)
    openai_server       a local OpenAI-compatible server (Chat Completions, Batch API, completions),
                        also on a local model (`serve_local_model`: "served:<model>")
    synthetic           a generated venue: papers, reviews, PDFs, and the bad cases curation must drop
    synthetic_text      deterministic paper and review text for the synthetic venue
    openreview_render   a venue rendered as OpenReview API v1 / v2 notes
"""
