"""The judges' rating readout (tasks/lm/readout.py `expected_ratings`, tasks/metrics/rating.py): the
rating is the expectation over 0-10 of the model's probabilities at the answer position after
"Score:" (G-Eval). On a small random-weight Llama the test builds (a word-level tokenizer in which
every score is one token), the judge's value equals that expectation computed by hand from one
forward pass; the prefix rule for tokenizers that split "10" into "1", "0" is checked on hand-made
token log-probabilities."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tasks.core.config import LLMConfig
from tasks.core.schema import REFERENCES, SCORING_CANDIDATES, SYNOPSES_WIDE
from tasks.lm.lazy import LazyLM
from tasks.lm.readout import expected_ratings, rating_masses
from tasks.metrics.judge import judge_family, load_prompt
from tasks.metrics.registry import REGISTRY, Resources
from tests.tiny_models import tiny_llama

SCORES_0_10 = [str(n) for n in range(11)]
WORDS = ["[UNK]", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "Score:", *SCORES_0_10,
         "the", "review", "paper", "is", "good", "weak", "method", "###", "Candidate", "Synopsis", "of"]


def tiny_judge(folder: Path) -> str:
    """A tiny random-weight Llama whose vocabulary holds the scale's numbers (tests/tiny_models.py)."""
    return tiny_llama(folder, WORDS, seed=0, sharpen=8)


def by_hand(folder: str, system: str, user: str) -> float:
    """sum_k k p(k) / sum_k p(k), p the next-token softmax after the chat prompt and "Score:"."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tasks.lm.loading import chat_ids

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = list(chat_ids(tokenizer, system, user)) + tokenizer("Score:", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([ids])).logits[0, -1].double(), dim=-1)
    mass = np.array([float(p[tokenizer.convert_tokens_to_ids(s)]) for s in SCORES_0_10])
    return float((mass / mass.sum()) @ np.arange(11))


@pytest.fixture(scope="module")
def judge_folder(tmp_path_factory) -> str:
    return tiny_judge(tmp_path_factory.mktemp("judge") / "m")


def test_numbers_split_into_digits_keep_only_their_own_mass() -> None:
    """"Score: 1" is a token prefix of "Score: 10": p(1) is p("1") less p("10")."""
    head = [-0.1, -0.1, -0.1]                                 # "Score", ":", " " (cancel out)
    eot = -2.0                                                # the end-of-turn token is not the answer's
    answers = ["Score: 0", "Score: 1", "Score: 10"]
    logprobs = [(*head, math.log(0.3), eot), (*head, math.log(0.5), eot),
                (*head, math.log(0.5), math.log(0.4), eot)]
    masses = rating_masses(answers, logprobs) / math.exp(-0.3)
    assert masses == pytest.approx([0.3, 0.5 - 0.5 * 0.4, 0.5 * 0.4])
    # a tokenizer with "10" as one token: "Score: 1" is no token prefix of it, nothing is taken away
    one_token = [(*head, math.log(0.3), eot), (*head, math.log(0.5), eot), (*head, math.log(0.1), eot)]
    assert rating_masses(answers, one_token) / math.exp(-0.3) == pytest.approx([0.3, 0.5, 0.1])


@pytest.mark.slow
def test_the_readout_judge_rates_with_the_expectation_by_hand(judge_folder, tmp_path) -> None:
    system, user = "the review is good", "the paper of the method is weak"
    from tasks.lm import local_lm
    from tasks.lm.loading import ModelSpec

    lm = local_lm(ModelSpec(judge_folder), 512)
    (read,) = expected_ratings(lm, [(system, user)], "Score:", range(11))
    assert read is not None and read.expected == pytest.approx(by_hand(judge_folder, system, user), abs=1e-5)
    assert 0.0 < read.mass <= 1.0 and sum(read.probabilities) == pytest.approx(1.0)

    # through the judge family: a local judge is read, never generated; its value is the same expectation
    judge = LazyLM(LLMConfig(backend="local", model=judge_folder), tmp_path)
    cands = pl.DataFrame([{"paper_id": "p", "candidate": "c", "source": "m", "review_id": None,
                           "review_text": "the method is weak", "judgments": None}], schema=SCORING_CANDIDATES)
    refs = pl.DataFrame([{"paper_id": "p", "review_id": "h", "review_text": "the paper is good", "judgments": None}],
                        schema=REFERENCES)
    syn = pl.DataFrame([{"paper_id": "p", "abstract": "the paper of the method"}], schema=SYNOPSES_WIDE)
    resources = Resources(llm=judge)
    rows = judge_family([REGISTRY["llm_judge_noref"]], cands, refs, None, syn, resources).scores
    row = rows.row(0, named=True)
    assert row["eval_lm"] == f"readout:local/{judge_folder}" and row["reason"] is None
    from tasks.metrics.judge import judge_user, synopsis_text

    asked = judge_user(synopsis_text({"abstract": "the paper of the method"}), "the method is weak", None)
    assert row["score"] == pytest.approx(by_hand(judge_folder, load_prompt("judge-free-v1"), asked), abs=1e-5)
    assert resources.log.answers()["value"].to_list() == [pytest.approx(row["score"])]
    # judge_method = "generate": the answer is generated and parsed, and the column says so
    generated = judge_family([REGISTRY["llm_judge_noref"]], cands, refs, None, syn,
                             Resources(llm=judge, judge_method="generate")).scores
    assert generated["eval_lm"].to_list() == [f"generate:local/{judge_folder}"]


class _FixedLM:
    """A backend whose log-likelihoods are given: the answer "Score: n" gets `p[n]` after a sure "Score:"."""

    model = "fixed"

    def __init__(self, p: list[float]) -> None:
        self.p = p

    def loglikelihood(self, requests):
        from tasks.lm.types import LoglikelihoodResult

        out = []
        for r in requests:
            n = int(r.continuation.rsplit(" ", 1)[1])
            digits = [math.log(self.p[n])] if n < 10 else [math.log(self.p[1]), math.log(self.p[10] / self.p[1])]
            lps = [0.0, *digits, 0.0]      # "Score:", the number's tokens, end of turn
            out.append(LoglikelihoodResult(math.fsum(lps[:-1]), len(lps), tuple(lps)))
        return out


def test_a_readout_with_almost_no_mass_on_the_scale_is_no_rating() -> None:
    """A model that puts 1e-6 of its probability on the scale's values is answering something else: renormalised,
    those crumbs would read as a confident rating. Below the floor the readout gives none (NaN downstream)."""
    from tasks.lm.readout import MIN_SCALE_MASS

    crumbs = [1e-7] * 11
    crumbs[7] = 4e-7                   # 1.4e-6 in all, most of it on 7
    (read,) = expected_ratings(_FixedLM(crumbs), [("s", "u")], "Score:", range(11))
    assert read is None and MIN_SCALE_MASS == 0.01
    sure = [0.02] * 11
    sure[7] = 0.5
    (read,) = expected_ratings(_FixedLM(sure), [("s", "u")], "Score:", range(11))
    assert read is not None and read.mass == pytest.approx(0.5 + 0.02 * 9) and 6 < read.expected < 7
