"""The qualify stage: an automatic qualification exam for the LLMs in a judging role (Auto-PRE).

    exam.py      the questions, drawn from the pipeline's curated reviews (pure)
    examinee.py  the models answering them: logit readout or stated confidence
    grade.py     the statistics (consistency, pertinence, self-confidence) and pass lines (pure)
    stage.py     who is examined, the run, the table, dropping failed judges from the panel
    steps.py     the Prefect tasks
"""
