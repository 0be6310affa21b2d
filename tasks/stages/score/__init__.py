"""The score stage: GEM / GEM-S log-probabilities under an evaluation LM, sharded for Prefect."""
