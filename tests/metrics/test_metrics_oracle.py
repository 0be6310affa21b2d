"""The statement-level TV f-variational oracle metric and the logit readout it runs on."""

from __future__ import annotations

import math

import polars as pl
import pytest

from tasks.core.frames import human_candidates
from tasks.core.schema import REFERENCES, SCORES, SYNOPSES_WIDE
from tasks.metrics import REGISTRY, MissingResource, Resources, score_metrics
from tasks.metrics.negatives import draw_negatives
from tasks.metrics.oracle import local_critic, statements, tv_fvar_statement_score


def _refs(n_papers: int, n_reviews: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """References whose judgment lines are all distinct (three per review)."""
    rows = [{"paper_id": f"paper{p}", "review_id": f"paper{p}-r{r}", "review_text": f"Review {r} of paper {p}.",
             "judgments": "\n".join(f"The reviewer questions point {p}.{r}.{i}." for i in range(3))}
            for p in range(n_papers) for r in range(n_reviews)]
    return pl.DataFrame(rows, schema=REFERENCES), pl.DataFrame(schema=SYNOPSES_WIDE)


def test_hand_worked_critics_and_scores() -> None:
    assert local_critic(0.6, 0.2) == pytest.approx(0.25)          # q = 0.75
    assert local_critic(0.3, 0.3) == 0.0 and local_critic(0.02, 0.0) == 0.5


def test_a_yes_no_answer_with_almost_no_mass_is_no_answer() -> None:
    """A readout that put 1e-6 of its probability on "Yes" and "No" together was answering something else: NaN,
    not a confident 0.5 from renormalised crumbs; at the floor it is an answer again."""
    assert math.isnan(local_critic(1e-6, 0.0)) and math.isnan(local_critic(6e-7, 4e-7))
    assert local_critic(0.008, 0.002) == pytest.approx(0.3)
    positive, negatives = [0.25, -0.25, 0.5], [[-0.5, -0.5], [0.0]]
    assert tv_fvar_statement_score(positive, negatives) == pytest.approx(0.5 / 3 - (-0.5 + 0.0) / 2)
    assert tv_fvar_statement_score(positive, [positive, positive]) == pytest.approx(0.0)   # negatives = positive
    assert tv_fvar_statement_score([0.5, 0.5], [[-0.5]]) == 1.0 and tv_fvar_statement_score([-0.5], [[0.5]]) == -1.0
    assert statements("a\n\n  b \n") == ["a", "b"]


def _fake_readout(refs: pl.DataFrame, asked: list[int]):
    """P(Yes) = 0.9, P(No) = 0.1 when the statement comes from a review of the candidate's paper, else reversed."""
    line_paper = {line: p for p, text in refs.select("paper_id", "judgments").iter_rows() for line in statements(text)}
    text_paper = {text: p for p, text in refs.select("paper_id", "judgments").iter_rows()}

    def readout(requests: pl.DataFrame) -> pl.DataFrame:
        asked.append(requests.height)
        rows = []
        for key, user in requests.select("key", "user").iter_rows():
            statement = user.split("### Statement\n")[1].split("\n")[0]
            candidate_paper = {p for text, p in text_paper.items() if text in user}
            same = line_paper[statement] in candidate_paper
            rows.append((key, 0.9 if same else 0.1, 0.1 if same else 0.9))
        return pl.DataFrame(rows, schema={"key": pl.String, "p_yes": pl.Float64, "p_no": pl.Float64}, orient="row")
    return readout


def test_statement_metric_through_the_registry() -> None:
    refs, syn = _refs(n_papers=3, n_reviews=2)
    cands = human_candidates(refs)
    negatives = draw_negatives(cands, refs, 2, seed=0)
    asked: list[int] = []
    scores = score_metrics(["tv_fvar_statement"], cands, refs, syn, Resources("lm", readout=_fake_readout(refs, asked)),
                           negatives=negatives)
    assert scores.schema == SCORES and scores.height == 3 * 2 * 1
    assert scores["score"].to_list() == pytest.approx([0.4 - (-0.4)] * scores.height)
    # one call; each distinct (candidate, statement) question once
    # candidate r0 asks about r1's 3 lines, r1 about r0's; plus 3 lines per distinct negative review
    used = set(zip(negatives["candidate"], negatives["negative"], strict=True))
    assert asked == [3 * (6 + len(used))]
    meta = REGISTRY["tv_fvar_statement"]
    assert meta.needs.name == "llm_oracle" and meta.negatives and meta.higher_is_better
    with pytest.raises(MissingResource):
        score_metrics(["tv_fvar_statement"], cands, refs, syn, Resources("lm", lambda r: r), negatives=negatives)


@pytest.mark.slow
def test_readout_matches_an_explicit_softmax_on_smollm2(embedded_lm) -> None:
    import torch

    from tasks.lm import ModelSpec, local_lm
    from tasks.lm.loading import chat_ids
    from tasks.lm.readout import answer_probabilities, first_tokens
    from tasks.metrics.oracle import question

    model, tokenizer = embedded_lm
    prompts = [question("The reviewer appreciates the clear writing.", "The reviewer appreciates the writing."),
               question("The reviewer criticizes the small experiments.", "The reviewer appreciates the writing.")]
    got = answer_probabilities(local_lm(ModelSpec()), prompts, ["Yes", "No"])
    ids = first_tokens(tokenizer, ["Yes", "No"])
    for row, (system, user) in zip(got, prompts, strict=True):
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([chat_ids(tokenizer, system, user)])).logits[0, -1].double()
        probs = torch.softmax(logits, dim=-1)              # every token of the vocabulary
        assert probs.shape[0] >= len(tokenizer) - 1
        assert row == pytest.approx([float(probs[i]) for i in ids], rel=1e-4, abs=1e-7)
    with pytest.raises(ValueError, match="first token"):
        first_tokens(tokenizer, ["Yes", "Yes please"])
