"""`grebench site`: a static website of the results (leaderboard, validation matrix, one page per
paper, the run record) rendered from the DuckDB results database with Jinja2 templates and
Vega-Lite charts (altair) drawn to SVG files, so it works from file:// with no CDN."""

from tasks.report.site.build import SiteResult, build_site

__all__ = ["SiteResult", "build_site"]
