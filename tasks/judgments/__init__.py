"""Reviews into atomic judgments and papers into synopses with an LLM (extract.py), and the checks
an extracted judgment must pass (checks.py). Read by preprocess, generate, validate and submit;
between the LM layer (tasks/lm) and the metric families (tasks/metrics)."""
