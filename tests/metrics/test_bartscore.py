"""BARTScore (tasks/metrics/bartscore.py) on a small random-weight BART the test builds from a config
(with a word-level tokenizer that closes every text with </s>): precision, recall and F1 equal a direct
computation (teacher-forced mean log-probability per target token), and without a model the metrics
say plainly that they cannot run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tasks.core.config import ScoreConfig
from tasks.core.schema import REFERENCES, SCORING_CANDIDATES
from tasks.metrics import MissingResource, score_metrics
from tasks.metrics.bartscore import Seq2SeqScorer
from tasks.metrics.registry import Resources

WORDS = ["<pad>", "<s>", "</s>", "[UNK]", "the", "method", "is", "novel", "weak", "paper", "results", "are",
         "strong", "missing", "ablation", "baselines", "clear", "writing"]


def tiny_bart(folder: Path) -> str:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", pad_token="<pad>",
                                                     bos_token="<s>", eos_token="</s>", model_max_length=64)
    config = transformers.BartConfig(vocab_size=len(WORDS), d_model=16, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                     decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                                     eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2)
    torch.manual_seed(0)
    transformers.BartForConditionalGeneration(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def direct(folder: str, source: str, target: str) -> float:
    """Mean over the target's tokens of log p(token | earlier target tokens, source), one pair at a time."""
    import torch
    from transformers import AutoTokenizer, BartForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = BartForConditionalGeneration.from_pretrained(folder).eval()
    src = tokenizer(source, return_tensors="pt")["input_ids"]
    tgt = tokenizer(target, return_tensors="pt")["input_ids"][0]
    decoder_in = torch.cat([torch.tensor([model.config.decoder_start_token_id]), tgt[:-1]]).unsqueeze(0)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=src, decoder_input_ids=decoder_in).logits[0].double(), dim=-1)
    return float(logp[torch.arange(len(tgt)), tgt].mean())


@pytest.fixture(scope="module")
def bart(tmp_path_factory) -> str:
    return tiny_bart(tmp_path_factory.mktemp("bart") / "m")


CANDS = pl.DataFrame([{"paper_id": "p", "candidate": "c1", "source": "m", "review_id": None,
                       "review_text": "the method is novel", "judgments": None},
                      {"paper_id": "p", "candidate": "c2", "source": "m", "review_id": None,
                       "review_text": "ablation baselines are missing and the writing is clear", "judgments": None}],
                     schema=SCORING_CANDIDATES)
REFS = pl.DataFrame([{"paper_id": "p", "review_id": "h1", "review_text": "the results are strong", "judgments": None},
                     {"paper_id": "p", "review_id": "h2", "review_text": "the paper is weak", "judgments": None}],
                    schema=REFERENCES)
NAMES = ["bartscore_seq2seq_precision", "bartscore_seq2seq_recall", "bartscore_seq2seq_f1"]


def test_bartscore_equals_a_direct_computation(bart) -> None:
    scores = score_metrics(NAMES, CANDS, REFS, pl.DataFrame(), Resources(seq2seq=Seq2SeqScorer(bart, device="cpu")))
    assert scores.height == 3 * 4 and scores["reason"].null_count() == 12 and set(scores["eval_lm"]) == {bart}
    got = {(r["metric"], r["candidate"], r["reference"]): r["score"] for r in scores.iter_rows(named=True)}
    texts = {**dict(CANDS.select("candidate", "review_text").iter_rows()),
             **dict(REFS.select("review_id", "review_text").iter_rows())}
    for c in ("c1", "c2"):
        for h in ("h1", "h2"):
            precision, recall = direct(bart, texts[h], texts[c]), direct(bart, texts[c], texts[h])
            assert got[("bartscore_seq2seq_precision", c, h)] == pytest.approx(precision, abs=1e-5)
            assert got[("bartscore_seq2seq_recall", c, h)] == pytest.approx(recall, abs=1e-5)
            assert got[("bartscore_seq2seq_f1", c, h)] == pytest.approx((precision + recall) / 2, abs=1e-5)
            assert precision < 0 and np.isfinite(precision)


def test_without_a_seq2seq_model_bartscore_says_it_cannot_run() -> None:
    with pytest.raises(MissingResource, match="bartscore_seq2seq_f1 needs a seq2seq model and none is installed"):
        score_metrics(["bartscore_seq2seq_f1"], CANDS, REFS, pl.DataFrame(), Resources())
    assert ScoreConfig().bartscore_model is None
    with pytest.raises(RuntimeError, match="not a seq2seq model"):
        Seq2SeqScorer("/nonexistent/bart").score(["a"], ["b"])


LM_WORDS = ["[UNK]", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>", *WORDS[3:], "You", "read", "peer",
            "reviews", "of", "research", "papers.", "Here", "one", "review", "a", "paper:", "Write", "another",
            "same", "paper.", "and"]


def test_bartscore_on_the_causal_evaluation_lm_equals_a_direct_computation(tmp_path) -> None:
    """GEM's BARTScore (section 4): s(x -> y) = log p(y | prompt quoting x) / |y| on the evaluation LM, through
    the log-likelihood engine, equal to one plain forward pass per direction."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tasks.core.schema import LOGLIK_RESULTS
    from tasks.lm.loglikelihood import LoglikelihoodEngine, reference_score
    from tasks.lm.types import LoglikelihoodRequest
    from tasks.metrics.bartscore import LM_SYSTEM, LM_USER
    from tests.tiny_models import tiny_llama

    folder = tiny_llama(tmp_path / "lm", LM_WORDS)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    engine = LoglikelihoodEngine(model, tokenizer, token_budget=512)

    def loglikelihood(requests: pl.DataFrame) -> pl.DataFrame:
        rows = [LoglikelihoodRequest(*r) for r in requests.select("system", "user", "continuation").iter_rows()]
        found = engine.score(rows)
        return pl.DataFrame({"key": requests["key"], "logprob": [r.logprob for r in found],
                             "n_tokens": [r.n_tokens for r in found], "truncated": [False] * len(found)},
                            schema=LOGLIK_RESULTS)

    names = ["bartscore_precision", "bartscore_recall", "bartscore_f1"]
    rows = score_metrics(names, CANDS, REFS, pl.DataFrame(), Resources(eval_lm="tiny", loglikelihood=loglikelihood))
    assert rows.height == 12 and rows["reason"].is_null().all()

    def s(source: str, target: str) -> float:
        (result,) = reference_score(model, tokenizer, [LoglikelihoodRequest(LM_SYSTEM, LM_USER.format(source=source),
                                                                            target)])
        return result.logprob / result.n_tokens

    by = {(r["candidate"], r["reference"], r["metric"]): r["score"] for r in rows.iter_rows(named=True)}
    for cand in CANDS.iter_rows(named=True):
        for ref in REFS.iter_rows(named=True):
            p, r = s(ref["review_text"], cand["review_text"]), s(cand["review_text"], ref["review_text"])
            key = (cand["candidate"], ref["review_id"])
            assert by[(*key, "bartscore_precision")] == pytest.approx(p, abs=1e-4)
            assert by[(*key, "bartscore_recall")] == pytest.approx(r, abs=1e-4)
            assert by[(*key, "bartscore_f1")] == pytest.approx((p + r) / 2, abs=1e-4)


def test_a_seq2seq_bartscore_without_a_model_stops_when_the_config_is_loaded(tmp_path) -> None:
    from tasks.checks import load_checked_config
    from tasks.core.config import ConfigError

    (tmp_path / "pipelines.toml").write_text("[score]\nbaselines = ['bartscore_seq2seq_f1']\n")
    with pytest.raises(ConfigError, match="bartscore_seq2seq_f1 need a seq2seq model: set \\[score\\] bartscore_model"):
        load_checked_config(tmp_path / "pipelines.toml")
    (tmp_path / "pipelines.toml").write_text("[score]\nbaselines = ['bartscore_f1']\n")
    assert load_checked_config(tmp_path / "pipelines.toml").score.baselines == ("bartscore_f1",)
