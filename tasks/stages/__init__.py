"""The pipeline's stages, one folder each: plain functions, and one steps.py with the stage's Prefect tasks.

Stages read each other's outputs only through the frames of tasks/core/schema.py at the places
tasks/core/layout.py names, never through another stage's functions.
"""
