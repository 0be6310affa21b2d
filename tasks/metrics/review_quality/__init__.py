"""Beyond Rating's text-centric review metrics and the rating outcomes.

* `fields`: a review's summary / strengths / weaknesses / questions and a candidate's rating and
  confidence, read from the markdown sections every review is rendered in;
* `formulas`: the pure formulas (point precision, Max-Recall, F1, focus KL, question score,
  summary coverage, Binoculars, rating error, accept / reject agreement);
* `points`: an LLM splits each field into atomic points with a category (table `points`);
* `matching`: an embedding pre-filter and an LLM judge decide M(a, h) (table `point_matches`);
* `questions`: whether a question point is grounded / constructive against the paper's chunks;
* `work`: the per-run context the metric family (tasks/metrics/quality.py) reads.
"""
