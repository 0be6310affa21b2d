"""Column contracts of the Parquet files stages hand to each other.

Each schema is a polars schema; `conform` casts a frame to it (adding missing nullable columns as
nulls, dropping nothing silently: an unexpected column is an error). Tests and the SQL layer rely
on these names, so change them here and nowhere else.
"""

from __future__ import annotations

import polars as pl

# Ingested papers, one row per submission of a venue (withdrawn and desk-rejected included).
PAPERS = pl.Schema(
    {
        "paper_id": pl.String,            # OpenReview forum id
        "venue_id": pl.String,
        "api_version": pl.Int8,           # 1 or 2
        "number": pl.Int64,               # submission number, when the venue exposes it
        "title": pl.String,
        "abstract": pl.String,
        "keywords": pl.List(pl.String),
        "primary_area": pl.String,
        "status": pl.String,              # active | withdrawn | desk_rejected
        "decision": pl.String,            # e.g. "Accept (poster)", "Reject"; null when unknown
        "meta_review": pl.String,
        "created_at": pl.Datetime("ms", "UTC"),
        "first_public_at": pl.Datetime("ms", "UTC"),  # earliest public date (contamination guard)
        "pdf_url": pl.String,
        # the PDF version kept (tasks/stages/ingest/versions.py): the one the reviewers saw, not a later revision
        "pdf_version": pl.String,         # edit id (v2) / reference id (v1); null without a history;
                                          # "latest, history not public": a v2 history outsiders cannot read
        "pdf_date": pl.Datetime("ms", "UTC"),
        "pdf_versions": pl.Int32,         # distinct PDF versions in the submission's history
    }
)

# Ingested official reviews in one schema whatever the venue's form. No reviewer identity.
REVIEWS = pl.Schema(
    {
        "review_id": pl.String,
        "paper_id": pl.String,
        "venue_id": pl.String,
        "rating_raw": pl.String,          # the form's string, e.g. "6: marginally above ..."
        "rating": pl.Float64,             # its leading number, on the venue's own scale
        "confidence_raw": pl.String,
        "confidence": pl.Float64,
        "soundness": pl.Float64,
        "presentation": pl.Float64,
        "contribution": pl.Float64,
        "summary": pl.String,
        "strengths": pl.String,
        "weaknesses": pl.String,
        "strengths_and_weaknesses": pl.String,  # combined section of older forms
        "questions": pl.String,
        "limitations": pl.String,
        "other_sections": pl.String,      # remaining text fields, "## Name\n\ntext" blocks
        "review_text": pl.String,         # the whole review rendered as markdown sections
        "created_at": pl.Datetime("ms", "UTC"),
        # The columns above hold the review's first version, these its final one (tasks/stages/ingest/versions.py).
        "rating_raw_final": pl.String,
        "rating_final": pl.Float64,       # on the venue's own scale
        "confidence_raw_final": pl.String,
        "confidence_final": pl.Float64,
        "review_text_final": pl.String,
        "edited_after_rebuttal": pl.Boolean,  # rating, confidence or text changed; null: no history read
        "final_at": pl.Datetime("ms", "UTC"),  # when the review was last modified
        # which versions the source gave (tasks/stages/ingest/versions.py): "first and final" | "one version" |
        # "final, history not public"; null: histories not read
        "review_history": pl.String,
    }
)

# The review columns a venue's review form may map a field onto (`[venues."..."] form`; "ignore"
# drops the field). tasks/stages/ingest/forms.py reads forms into these columns.
REVIEW_SCORE_COLUMNS = frozenset({"rating", "confidence", "soundness", "presentation", "contribution"})
REVIEW_SECTION_COLUMNS = ("summary", "strengths", "weaknesses", "strengths_and_weaknesses", "questions",
                          "limitations")
FORM_COLUMNS = REVIEW_SCORE_COLUMNS | set(REVIEW_SECTION_COLUMNS) | {"ignore"}

# Text extracted from a paper's PDF.
PDF_TEXTS = pl.Schema(
    {
        "paper_id": pl.String,
        "page_count": pl.Int32,
        "text": pl.String,                # body without references, appendices, acknowledgements
        "text_no_related_work": pl.String,  # the same without the related-work section
        "n_chars": pl.Int64,
        # text a reader of the rendered page cannot see (tasks/stages/ingest/pdf_hidden.py): per run
        # of hidden characters its page, why it is hidden and what it says; stripped from `text` unless
        # [ingest] strip_hidden_text = false
        "hidden": pl.List(pl.Struct({"page": pl.Int32, "reason": pl.String, "text": pl.String})),
        "hidden_stripped": pl.Boolean,
    }
)

# Everything dropped or unreadable, with the rule that dropped it.
REJECTS = pl.Schema(
    {
        "stage": pl.String,               # ingest | curate | preprocess | ...
        "entity": pl.String,              # paper | review | pdf | page | judgment | ...
        "entity_id": pl.String,
        "paper_id": pl.String,
        "venue_id": pl.String,
        "rule": pl.String,                # short machine-readable reason, e.g. low_confidence
        "detail": pl.String,              # human-readable specifics (the offending value)
    }
)

# Per curation rule: rows in, rows out.
CURATION_REPORT = pl.Schema(
    {
        "venue_id": pl.String,
        "step": pl.Int32,
        "rule": pl.String,
        "entity": pl.String,
        "rows_in": pl.Int64,
        "rows_out": pl.Int64,
    }
)

# What a venue's source cannot give (the venue table's `source_limits`), one row per statement,
# beside the curation report (curate/source_limits.parquet; only for venues that state some).
SOURCE_LIMITS = pl.Schema({"venue_id": pl.String, "limit": pl.String})

# Values of `pdf_version` / `review_history` that say what a hidden (API v2) edit history allowed
# (tasks/stages/ingest/versions.py).
HIDDEN_PDF = "latest, history not public"       # pdf_version of a paper whose v2 history is hidden
REVIEW_READ, REVIEW_ONE, REVIEW_HIDDEN = "first and final", "one version", "final, history not public"

# Per venue, entity (paper | review) and case of the versions the source gave (tasks/stages/ingest/versions.py:
# "the version the reviewers saw", "latest, history not public", "first and final", ...), how many
# rows were ingested and kept by curation (curate/version_coverage.parquet).
VERSION_COVERAGE = pl.Schema({"venue_id": pl.String, "entity": pl.String, "case": pl.String,
                              "ingested": pl.Int64, "kept": pl.Int64})


def empty(schema: pl.Schema) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def conform(frame: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    """Cast `frame` to `schema`, adding absent columns as nulls; unknown columns are an error."""
    unknown = set(frame.columns) - set(schema.names())
    if unknown:
        raise ValueError(f"unexpected columns {sorted(unknown)}")
    return frame.select(
        pl.col(name).cast(dtype) if name in frame.columns else pl.lit(None, dtype).alias(name)
        for name, dtype in schema.items()
    )


def rejects(rows: list[dict[str, str | None]]) -> pl.DataFrame:
    """A rejects frame from dicts holding some of the REJECTS columns."""
    if not rows:
        return empty(REJECTS)
    return conform(pl.DataFrame(rows, infer_schema_length=None), REJECTS)


# Curated papers (curate stage): the ingested columns plus the kept-review statistics and the
# benchmark-sample flag.
CURATED_PAPERS = pl.Schema(
    {
        **PAPERS,
        "n_reviews": pl.Int32,            # kept reviews of the paper
        "rating_mean": pl.Float64,        # over kept reviews, on the common scale
        "rating_var": pl.Float64,         # variance with curate.variance_ddof
        "in_benchmark": pl.Boolean,       # drawn into the seeded benchmark sample
    }
)

# Curated reviews (curate stage): `rating` is on the common scale; the venue's own value moves
# to `rating_venue`.
CURATED_REVIEWS = pl.Schema({**REVIEWS, "rating_venue": pl.Float64,
                             "review_version": pl.String})   # first | final: what rating .. review_text hold


# ---- preprocess --------------------------------------------------------------------------------
# Atomic judgments of a review (human or generated: review_id is then the candidate_id).
JUDGMENTS = pl.Schema(
    {
        "review_id": pl.String,
        "position": pl.Int32,
        "stance": pl.String,              # appreciates | criticizes | questions | suggests
        "text": pl.String,                # "The reviewer <stance> ..."
        "model": pl.String,
        "prompt_version": pl.String,
    }
)

# Per paper its synopses, one row per kind (abstract | assw).
SYNOPSES = pl.Schema(
    {
        "paper_id": pl.String,
        "kind": pl.String,
        "text": pl.String,
        "source": pl.String,              # abstract | pdf_text | pdf_text_truncated
        "model": pl.String,               # the LLM that wrote it; null for the abstract
    }
)

# LLM usage of a stage, one row per purpose (judgments, synopses, generate:<candidate>, ...).
USAGE = pl.Schema(
    {
        "purpose": pl.String,
        "backend": pl.String,
        "model": pl.String,
        "requests": pl.Int64,
        "cached": pl.Int64,               # answered from the LLM cache: no call made
        "errors": pl.Int64,
        "input_tokens": pl.Int64,
        "output_tokens": pl.Int64,
        "cache_read_tokens": pl.Int64,
        "cache_write_tokens": pl.Int64,
        "cost_usd": pl.Float64,
    }
)

# ---- generate ----------------------------------------------------------------------------------
# One review by a candidate LLM of a benchmark paper.
GENERATED = pl.Schema(
    {
        "candidate_id": pl.String,        # "<model>/<paper_id>"; the review_id of the generated review
        "paper_id": pl.String,
        "venue_id": pl.String,
        "model": pl.String,               # the candidate's configured name
        "backend": pl.String,
        "model_id": pl.String,            # the model the backend reported
        "prompt_version": pl.String,
        "review": pl.String,              # markdown: "## Summary" / "## Strengths" / ... blocks
        "sections": pl.Int32,             # how many of the four parts the answer had
        "text_source": pl.String,         # pdf_text | abstract
        "truncated": pl.Boolean,          # the paper text was cut to fit the context
        "cut": pl.String,                 # none | section | paragraph | word
        "kept_chars": pl.Int64,
        "paper_chars": pl.Int64,
        "answer_truncated": pl.Boolean,   # the answer stopped at max_tokens
        "input_tokens": pl.Int64,         # over every attempt (a retry included)
        "output_tokens": pl.Int64,
        "tokens": pl.Int64,               # input + output
        "cost": pl.Float64,               # USD at the configured prices, whether or not cached now
        # the answer's <rating> / <confidence> parts (prompts that ask for them, e.g. review-fields-v1)
        "rating_answer": pl.String,
        "confidence_answer": pl.String,
        # the candidate's rating on the common scale and how it was had: the rating the review states
        # (stated), else read at its answer's rating position (readout:<backend>/<model> |
        # toplogprobs:<backend>/<model> | asked:<backend>/<model> | answer), or submitted;
        # tasks/stages/generate/ratings.py); null rating: the method gave none
        "rating": pl.Float64,
        "rating_method": pl.String,
    }
)

# The injection track (tasks/stages/generate/injection.py): a candidate's review of a paper copy
# carrying a planted instruction; candidate_id "<model>/<paper_id>#inject-<variant>".
INJECTED = pl.Schema({**GENERATED, "variant": pl.String})   # visible | hidden

# Papers the contamination guard kept from a candidate (tasks/stages/generate/contamination.py).
EXCLUSIONS = pl.Schema(
    {
        "paper_id": pl.String,
        "venue_id": pl.String,
        "model": pl.String,                          # the candidate's name
        "first_public_at": pl.Datetime("ms", "UTC"),  # the date the guard used (see date_source)
        "date_source": pl.String,                    # first_public_at | created_at | none
        "knowledge_cutoff": pl.Date,
        "reason": pl.String,                         # public_on_or_before_cutoff | no_public_date
    }
)

# Per candidate model and injection variant: how far a planted instruction moved its reviews against
# its reviews of the clean copies (injected minus clean, per paper; mean and t interval over papers).
# `measure` is "rating" (common scale) or the metric's name (the first of [score] metrics).
INJECTION_SHIFTS = pl.Schema({"model": pl.String, "variant": pl.String, "measure": pl.String, "eval_lm": pl.String,
                              "n_papers": pl.Int64, "shift": pl.Float64, "ci_low": pl.Float64,
                              "ci_high": pl.Float64, "confidence": pl.Float64, "reason": pl.String})

# ---- scoring frames (tasks/metrics, tasks/scoring) ----

# The human reviews of each paper that candidates are scored against. `judgments`: the review's
# preprocessed judgment lines, one per line (null without preprocessing).
REFERENCES = pl.Schema({"paper_id": pl.String, "review_id": pl.String, "review_text": pl.String,
                        "judgments": pl.String})

# The reviews being scored. `candidate` is a unique id of the candidate review; `source` says who
# wrote it ("human" or a model name); `review_id` names the human review the candidate *is*, which
# is left out of its references (null for generated candidates).
SCORING_CANDIDATES = pl.Schema({"paper_id": pl.String, "candidate": pl.String, "source": pl.String,
                                "review_id": pl.String, "review_text": pl.String, "judgments": pl.String})

# One row per paper: what a conditioned metric may condition on.
# `assw_source`: what the ASSW was written from (pdf_text, pdf_text_truncated, or abstract when the paper
# had no PDF text); `paper_text`: the paper's PDF text, read only for metrics conditioned on "paper".
SYNOPSES_WIDE = pl.Schema({"paper_id": pl.String, "abstract": pl.String, "assw": pl.String,
                           "assw_source": pl.String, "paper_text": pl.String})

# One row per (candidate, reference, metric); every metric writes these columns. A pair that cannot
# be scored has a NaN score and a `reason`. The log-probability columns are null for metrics that
# read none; `eval_lm` names the model (or library) behind the score.
SCORES = pl.Schema({"paper_id": pl.String, "candidate": pl.String, "source": pl.String, "reference": pl.String,
                    "metric": pl.String, "score": pl.Float64, "logp_conditional": pl.Float64,
                    "logp_marginal": pl.Float64, "n_tokens": pl.Int64, "eval_lm": pl.String,
                    "reason": pl.String,
                    # where a valid score came from, when it matters (e.g. "assw_from_abstract": gem_s_assw
                    # conditioned on an ASSW the preprocess LLM wrote from the abstract, not the paper)
                    "note": pl.String})

# One row per human reference: its Binoculars AI-likelihood score (Beyond Rating, paper 003) on the
# observer / performer pair, and whether it falls below the threshold (flagged: likely AI-written;
# null where the score is NaN, with the reason). tasks/stages/score/reference_flags.py
REFERENCE_FLAGS = pl.Schema({"paper_id": pl.String, "review_id": pl.String, "binoculars": pl.Float64,
                             "threshold": pl.Float64,
                             "threshold_source": pl.String,   # where the threshold comes from (published / calibrated)
                             "flagged": pl.Boolean, "reason": pl.String,
                             "observer": pl.String, "performer": pl.String,
                             "text_sha256": pl.String})   # of the review text scored: a rerun reuses a match

# One row per (paper, candidate, metric): the mean of its SCORES over the paper's references.
CANDIDATE_SCORES = pl.Schema({"paper_id": pl.String, "candidate": pl.String, "source": pl.String,
                              "metric": pl.String, "eval_lm": pl.String, "score": pl.Float64,
                              "n_references": pl.Int64, "reason": pl.String})

# Log-likelihood requests and their results, as the score stage's Parquet shards
# (score/requests/<shard>.parquet, score/results/<shard>.parquet). `key` hashes the request's content.
LOGLIK_REQUESTS = pl.Schema({"key": pl.String, "system": pl.String, "user": pl.String, "continuation": pl.String})
# truncated: the request was cut to fit the evaluation LM (tasks/lm/fitting.py); absent in older shards
LOGLIK_RESULTS = pl.Schema({"key": pl.String, "logprob": pl.Float64, "n_tokens": pl.Int64, "truncated": pl.Boolean})
TRUNCATED_REASON = "truncated: a text was cut to fit the evaluation LM (see docs/reliability.md)"


def with_truncated(results: pl.DataFrame) -> pl.DataFrame:
    """`results` with a `truncated` column (false where older results or callers have none)."""
    if "truncated" not in results.columns:
        return results.with_columns(pl.lit(False).alias("truncated"))
    return results.with_columns(pl.col("truncated").fill_null(False))

# Negative references (tasks/metrics/negatives.py): for each (candidate, reference) pair, the
# references of other papers of the same group drawn for the f-variational estimators, `draw`
# numbering them 0..K-1. Stored with the scores (score/negatives.parquet) so reruns are identical.
NEGATIVES = pl.Schema({"paper_id": pl.String, "candidate": pl.String, "reference": pl.String, "draw": pl.Int64,
                       "negative": pl.String, "negative_paper": pl.String})

# Yes/no questions to an LLM oracle and the probabilities read from the evaluation LM's next-token
# distribution (tasks/lm/readout.py, tasks/metrics/oracle.py). `key` hashes the question's content.
ORACLE_REQUESTS = pl.Schema({"key": pl.String, "system": pl.String, "user": pl.String})
ORACLE_RESULTS = pl.Schema({"key": pl.String, "p_yes": pl.Float64, "p_no": pl.Float64})


# ---- qualify -----------------------------------------------------------------------------------
# The judging panel's Auto-PRE fusion weights (tasks/stages/qualify): one row per panel member.
PANEL_WEIGHTS = pl.Schema(
    {
        "model": pl.String,               # backend/model of a member of the judging panel
        "weight": pl.Float64,             # its Auto-PRE fusion weight
        "source": pl.String,              # exam | config | none (weighs 1)
        "applied": pl.Boolean,            # the panel's scores use it (all but [qualify] on_fail = "report")
    }
)

# The qualification exam of the LLMs in a judging role (tasks/stages/qualify): one row per model, role and test.
QUALIFICATION = pl.Schema(
    {
        "model": pl.String,               # backend/model, or readout:<evaluation LM key>
        "role": pl.String,                # judge | oracle | matcher
        "test": pl.String,                # consistency | pertinence | self_confidence
        "n": pl.Int64,                    # items (consistency) or questions answered
        "score": pl.Float64,              # P_c, P_p or P_s as paper 001 defines them (P_s is 0 or 1)
        "raw_score": pl.Float64,          # the statistic as measured (self-confidence: easy minus hard mean confidence)
        "threshold": pl.Float64,          # the pass line, on raw_score
        "passed": pl.Boolean,
        "confidence": pl.String,          # how confidence was read: readout | stated
    }
)


# `grebench submit`'s one row per submission (tasks/stages/generate/submit.py); here so the damage guard's
# column kinds (`kind_problem`) know its columns ("flagged" counts reviews there, a true/false elsewhere)
SUBMISSIONS = pl.Schema({
    "name": pl.String, "pipeline": pl.String, "file": pl.String, "file_sha256": pl.String, "format": pl.String,
    "knowledge_cutoff": pl.Date, "submitted_at": pl.Datetime("ms", "UTC"), "model": pl.String,
    "rows_in": pl.Int64, "accepted": pl.Int64, "excluded": pl.Int64, "rejected": pl.Int64,
    "benchmark_papers": pl.Int64, "missing": pl.Int64, "replaced": pl.Boolean,
    "flagged": pl.Int64,          # accepted reviews carrying text aimed at the evaluators (screening.py)
})


def kind(dtype: pl.DataType) -> str:
    """What a column holds, as a reader of it cares: "number", "text", "true/false", "a date",
    "a list", "a struct", else the type's name ("Binary", "Null", ...)."""
    if dtype.is_numeric():
        return "number"
    if dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum):
        return "text"
    if dtype == pl.Boolean:
        return "true/false"
    if dtype.is_temporal():
        return "a date"
    if isinstance(dtype, pl.List | pl.Array):
        return "a list"
    if isinstance(dtype, pl.Struct):
        return "a struct"
    return str(dtype)


def _column_kinds() -> dict[str, str]:
    """Every column of the schemas above that holds one kind wherever it appears."""
    seen: dict[str, set[str]] = {}
    for value in list(globals().values()):
        if isinstance(value, pl.Schema):
            for name, dtype in value.items():
                seen.setdefault(name, set()).add(kind(dtype))
    return {name: kinds.pop() for name, kinds in seen.items() if len(kinds) == 1}


def kind_problem(found: pl.Schema) -> str | None:
    """The first column of `found` (a stage output's schema) holding another kind than the schemas
    here give it (a rating as text, a paper_id as a list), in one phrase; None when there is none.
    An all-null column (Null) fits any kind."""
    kinds = _column_kinds()
    for name, dtype in found.items():
        expected = kinds.get(name)
        if expected is not None and dtype != pl.Null and kind(dtype) != expected:
            return f"column {name!r} holds {dtype} ({kind(dtype)}), where the project writes {expected}"
    return None
