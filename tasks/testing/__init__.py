"""Test doubles for tests, the demo and the benches; no stage imports them except through
tasks/stages/ingest/sources.py (a "synthetic" pipeline).

    openreview_server   a local OpenReview-compatible HTTP server (API v1 and v2) serving venues
    anthropic_server    a local Anthropic-compatible server (Messages and Message Batches)
    synthetic           a generated venue: papers, reviews, PDFs, and the bad cases curation must drop
    synthetic_text      deterministic paper and review text for the synthetic venue
    openreview_render   a venue rendered as OpenReview API v1 / v2 notes
"""
