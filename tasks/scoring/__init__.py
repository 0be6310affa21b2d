"""How metrics run at scale: request shards on the evaluation LM (shards.py), metric shards per
paper (metric_shards.py), their Prefect fan-out behind the eval-LM slot (fanout.py) and panels of
several evaluation LMs (eval_lms.py). Between the metric families (tasks/metrics) and the stages."""
