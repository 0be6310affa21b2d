"""The log-likelihood engine against a plain full-vocabulary computation, batching, padding and order."""

from __future__ import annotations

import os
import random
from pathlib import Path

import polars as pl
import pytest
import torch

from tasks.core.frames import human_candidates, judgments_text, synopses_wide
from tasks.core.schema import REFERENCES
from tasks.lm import LoglikelihoodRequest, ModelSpec
from tasks.lm.cpu import _cpuinfo, cpu_flags, cpu_has_bf16
from tasks.lm.loading import common_prefix, end_of_turn
from tasks.lm.local import LocalLM
from tasks.lm.loglikelihood import LoglikelihoodEngine, encode_request, reference_score
from tasks.metrics import get
from tasks.metrics.gem import build_requests
from tests.scoring_data import make_frames

ROOT = Path(__file__).resolve().parents[2]

GEM = ["gem_raw", "gem", "gem_s_abstract", "gem_s_assw"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def metric_requests() -> list[LoglikelihoodRequest]:
    return gem_requests()


def gem_requests() -> list[LoglikelihoodRequest]:
    """For every metric, one conditional and one marginal request built by the metric code itself."""
    frames = make_frames(n_papers=1, n_reviews=2, seed=11)
    refs = frames["reviews"].join(judgments_text(frames["judgments"]), on="review_id").select(REFERENCES.names())
    pairs, requests = build_requests(human_candidates(refs), refs, synopses_wide(frames["synopses"]),
                                     get(GEM), "smollm2")
    by_key = {r["key"]: LoglikelihoodRequest(r["system"], r["user"], r["continuation"]) for r in requests.iter_rows(named=True)}
    chosen = []
    for metric in GEM:
        pair = pairs.filter(pl.col("metric") == metric).row(0, named=True)
        chosen += [by_key[pair["cond_key"]], by_key[pair["marg_key"]]]
    return chosen


@pytest.fixture(scope="module")
def lm(embedded_lm) -> LocalLM:
    lm = LocalLM(ModelSpec(), token_budget=1024)
    assert lm.engine.model is embedded_lm[0]        # the session's model, not a second copy
    return lm


@pytest.fixture(scope="module")
def batched(lm, metric_requests):
    return lm.loglikelihood(metric_requests)


def test_only_the_answer_and_its_end_of_turn_are_scored(embedded_lm, metric_requests) -> None:
    model, tokenizer = embedded_lm
    request = metric_requests[0]
    eot = end_of_turn(tokenizer)
    assert tokenizer.convert_ids_to_tokens(list(eot)) == ["<|im_end|>"]
    prompt, target = encode_request(tokenizer, request, eot)
    assert tokenizer.decode(list(target)) == request.continuation + "<|im_end|>"
    chat = [{"role": "system", "content": request.system}, {"role": "user", "content": request.user},
            {"role": "assistant", "content": request.continuation}]
    assert tokenizer.apply_chat_template(chat, tokenize=False).startswith(tokenizer.decode(list(prompt + target)))
    with pytest.raises(ValueError, match="empty continuation"):
        LocalLM(ModelSpec()).loglikelihood([LoglikelihoodRequest(request.system, request.user, "  ")])


def test_matches_full_vocabulary_forward_for_every_metric_prompt(embedded_lm, metric_requests, batched) -> None:
    model, tokenizer = embedded_lm
    reference = reference_score(model, tokenizer, metric_requests)
    for got, want in zip(batched, reference, strict=True):
        assert got.n_tokens == want.n_tokens == len(got.token_logprobs)
        worst = max(abs(a - b) for a, b in zip(got.token_logprobs, want.token_logprobs, strict=True))
        assert worst < 1e-4
        assert got.logprob == pytest.approx(sum(got.token_logprobs), abs=1e-9)


def test_same_results_unbatched_in_any_order_and_with_duplicates(lm, metric_requests, batched) -> None:
    # one request per call: no batch, no padding, and the shared prefix is that request's whole prompt
    for i in (0, len(metric_requests) - 1):
        (alone,) = lm.loglikelihood([metric_requests[i]])
        assert alone.logprob == pytest.approx(batched[i].logprob, abs=1e-4)
    order = list(range(len(metric_requests)))
    random.Random(3).shuffle(order)
    doubled = [metric_requests[i] for i in order] + [metric_requests[0]]
    shuffled = lm.loglikelihood(doubled)
    for position, i in enumerate(order):
        assert shuffled[position].logprob == batched[i].logprob   # same batches, bit for bit
    assert shuffled[-1].logprob == batched[0].logprob


def test_two_threads_score_on_engines_of_their_own_over_one_model(lm, metric_requests, batched) -> None:
    """Two scoring tasks of one process side by side (the score stage's GEM and metric shards): each
    thread gets its own engine (prefix caches, counters) on the shared weights, and the same values."""
    from concurrent.futures import ThreadPoolExecutor

    from tasks.lm.local import sharing_cores

    def score_in_a_task() -> tuple[int, list]:
        return id(lm.engine), lm.loglikelihood(metric_requests)

    with sharing_cores(2), ThreadPoolExecutor(2) as pool:
        runs = [f.result() for f in [pool.submit(score_in_a_task) for _ in range(2)]]
    engines = {engine for engine, _ in runs}
    assert len(engines) == 2 and id(lm.engine) not in engines
    for _, results in runs:
        for mine, alone in zip(results, batched, strict=True):
            assert mine.logprob == pytest.approx(alone.logprob, abs=1e-3) and mine.n_tokens == alone.n_tokens


def test_tight_budget_packs_small_batches(embedded_lm, metric_requests, batched) -> None:
    subset = [2, 3, 6, 7]                           # gem and gem_s_assw: conditional and marginal
    small = LocalLM(ModelSpec(), token_budget=128)
    results = small.loglikelihood([metric_requests[i] for i in subset])
    stats = small.engine.stats
    assert stats.batches > 2 and stats.padded_tokens == stats.forward_tokens   # flat on a CPU: no padding
    for got, want in zip(results, [batched[i] for i in subset], strict=True):
        assert got.logprob == pytest.approx(want.logprob, abs=1e-4)


def test_packed_rows_agree_with_the_body_then_continuations_path(embedded_lm, metric_requests, batched) -> None:
    # `batched` is packed (the default): a prompt's body and all its continuations in one row under
    # a block mask; the engine before packing ran bodies first, then continuations on their KV
    model, tokenizer = embedded_lm
    unpacked = LoglikelihoodEngine(model, tokenizer, token_budget=1024, packed=False).score(metric_requests)
    for a, b in zip(batched, unpacked, strict=True):
        assert a.n_tokens == b.n_tokens
        assert max(abs(x - y) for x, y in zip(a.token_logprobs, b.token_logprobs, strict=True)) < 1e-4


def test_questions_quoting_one_candidate_share_a_row_and_match_the_full_forward(embedded_lm) -> None:
    # an oracle's questions: one candidate quoted in each, its statements differ; packed into one row,
    # the candidate is computed once, and every answer still matches the plain computation
    from tasks.metrics.oracle import question

    model, tokenizer = embedded_lm
    candidate = ("The reviewer appreciates the clear ablation study.\nThe reviewer criticizes the small "
                 "datasets used in section 4.\nThe reviewer questions whether the baseline was tuned.")
    statements = ["The reviewer criticizes the evaluation.", "The reviewer appreciates the theory.", "x"]
    requests = [LoglikelihoodRequest(*question(candidate, s), a) for s in statements for a in ("Yes", "No")]
    engine = LoglikelihoodEngine(model, tokenizer, token_budget=1024)
    got = engine.score(requests)
    assert engine.stats.batches == 2                     # the shared head, then one row
    body = len(engine.encode(requests[0])[0]) - 1
    assert engine.stats.forward_tokens < 2 * body        # three prompts, the quoted candidate once
    for a, b in zip(got, reference_score(model, tokenizer, requests), strict=True):
        assert max(abs(x - y) for x, y in zip(a.token_logprobs, b.token_logprobs, strict=True)) < 1e-4


def test_flat_batches_agree_with_padded_rows(embedded_lm, metric_requests, batched) -> None:
    # the default layout on a CPU (one flat sequence per batch after the head's cached KV, attention run
    # block by block on the keys each run of queries may see) against padded rows over a copied head KV
    model, tokenizer = embedded_lm
    engine = LoglikelihoodEngine(model, tokenizer, token_budget=1024, flat=False)
    assert not engine.flat and engine.sparsity == "paths"   # no GPU here: the CPU rule, by path
    rows = engine.score(metric_requests)
    for a, b in zip(batched, rows, strict=True):
        assert a.n_tokens == b.n_tokens
        assert max(abs(x - y) for x, y in zip(a.token_logprobs, b.token_logprobs, strict=True)) < 1e-4


def test_attention_by_path_is_dense_attention_on_each_segments_path() -> None:
    # a flat batch's rule after a 5-token head: two rows, the second with a shared part, two prompts and
    # three continuations; attention segment by segment (each on its path's keys) equals one dense
    # masked call, and the keys it attends to are the pairs the rule allows plus padding
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    from tasks.lm.flat_attention import KEY_STEP, PLAN, _by_path, flat_mask, query_rows

    # row 0: a body (0, 1), continuations (2, 3) and (4, 5); row 1: a shared part (6, 7), one prompt's
    # suffix (8) and its continuations (9), (10), the other's suffix (11) and its continuation (12-14)
    end = torch.tensor([6, 6, 4, 4, 6, 6] + [15, 15, 11, 10, 11, 15, 15, 15, 15])
    mask = flat_mask(end, "paths", past=5, fold=3)
    assert mask.shape == (1, 1, 15, 20) and bool(mask[0, 0, :, :5].all())
    plan = getattr(mask, PLAN).groups
    starts = sorted(int(start) for group in plan for start in group.targets[group.rows % group.mask.shape[2] == 0])
    # segments, each a stretch where every token sees the one before it: the body and its first
    # continuation, the second continuation, the shared part with the first suffix and its first
    # continuation, its second continuation, the other suffix with its continuation
    assert starts == [0, 4, 6, 10, 11]
    assert sorted(int(t) for group in plan for t in group.targets) == list(range(15))
    assert all(query_rows(group.mask.shape[2], 3) == group.mask.shape[2] for group in plan)
    assert all(group.mask.shape[3] % KEY_STEP == 0 for group in plan)
    torch.manual_seed(0)
    query, key, value = torch.randn(1, 6, 15, 8), torch.randn(1, 2, 20, 8), torch.randn(1, 2, 20, 8)
    dense = scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True).transpose(1, 2)
    assert torch.allclose(_by_path(query, key, value, getattr(mask, PLAN), None), dense, atol=1e-6)
    # every real query row sees exactly the keys the rule gives it
    seen = sum(int(group.mask.flatten(0, 2)[group.rows].sum()) for group in plan)
    assert seen == int(mask.sum())


BF16_UNITS = pytest.mark.skipif(not cpu_has_bf16(_cpuinfo()), reason="bfloat16 runs natively only on a CPU with bf16 units")


@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=BF16_UNITS)])
def test_a_token_attends_bit_for_bit_the_same_whatever_else_is_in_its_batch(dtype) -> None:
    # one prompt (600 tokens) and its continuation (100) after a 5-token head, laid out alone, and inside
    # a batch: after another row, its first 400 tokens shared with a second prompt (so its segments are
    # cut elsewhere), before a third row. The same query, key and value vectors at their places give
    # the same attention output to the bit
    from tasks.lm.flat_attention import PLAN, _by_path, flat_mask

    dtype = getattr(torch, dtype)
    torch.manual_seed(1)
    mine = torch.randn(3, 15, 700, 64).to(dtype)        # per token: 9 query, 3 key and 3 value heads
    head = torch.randn(2, 3, 5, 64).to(dtype)

    def attend(parts: list[tuple[torch.Tensor | int, int]]) -> torch.Tensor:
        """Parts in layout order: (states or a count of random tokens, where their stretch ends)."""
        ends, states = [], []
        for part, end in parts:
            part = torch.randn(3, 15, part, 64).to(dtype) if isinstance(part, int) else part
            ends += [end] * part.shape[2]
            states.append(part)
        states = torch.cat(states, dim=2)
        mask = flat_mask(torch.tensor(ends), "paths", past=5, fold=3)
        key = torch.cat([head[0], states[1, 9:12]], dim=1)[None]
        value = torch.cat([head[1], states[2, 12:15]], dim=1)[None]
        return _by_path(states[0, :9][None], key, value, getattr(mask, PLAN), 0.125)[0]

    prompt, continuation = mine[:, :, :600], mine[:, :, 600:]
    alone = attend([(prompt, 700), (continuation, 700)])
    # row (300) | shared (400) | my prompt's rest (200) + continuation (100) | other prompt (150) + its
    # continuation (50) | row (200)
    inside = attend([(300, 300), (prompt[:, :, :400], 1200), (prompt[:, :, 400:], 1000), (continuation, 1000),
                     (150, 1200), (50, 1200), (200, 1400)])
    assert torch.equal(alone, inside[300:1000])


def test_a_request_scores_the_same_alone_and_inside_other_batches(embedded_lm, metric_requests) -> None:
    # a request's value must not depend on what else is in its batch, in either layout
    model, tokenizer = embedded_lm
    target = metric_requests[3]
    for flat in (False, True):
        (alone,) = LoglikelihoodEngine(model, tokenizer, token_budget=1024, flat=flat).score([target])
        for budget, others in ((1024, metric_requests), (256, metric_requests[::-1]), (4096, metric_requests[4:])):
            engine = LoglikelihoodEngine(model, tokenizer, token_budget=budget, flat=flat)
            inside = engine.score([*others, target])[-1]
            assert inside.logprob == pytest.approx(alone.logprob, abs=1e-4), (flat, budget)


def bf16_batch_drift() -> float:
    """The largest difference in nats between a GEM request scored alone and inside other batches, on the CPU's own
    bf16 units (not the emulation the suite pins: `GREBENCH_CPU_BF16=0`)."""
    from tasks.lm import load_model

    os.environ["GREBENCH_CPU_BF16"] = "1"
    model, tokenizer = load_model(ModelSpec(dtype="bfloat16"))
    assert model.dtype == torch.bfloat16
    requests, drift = gem_requests(), 0.0
    for target in requests:
        (alone,) = LoglikelihoodEngine(model, tokenizer, token_budget=1024).score([target])
        for budget, others in ((1024, requests), (256, requests[::-1]), (4096, requests[4:])):
            inside = LoglikelihoodEngine(model, tokenizer, token_budget=budget).score([*others, target])[-1]
            drift = max(drift, abs(inside.logprob - alone.logprob))
    return drift


@pytest.mark.slow
@BF16_UNITS
def test_in_bfloat16_a_request_scores_the_same_alone_and_inside_other_batches() -> None:
    # the same check in bfloat16 on the CPU's flat layout, for every request: each token is computed
    # from its path's keys, in path order, in kernel shapes that do not depend on its neighbours
    # (tasks/lm/flat_attention.py), so no bf16 rounding flips with the batch. On a CPU with AMX tiles
    # that holds with oneDNN held to AVX-512 BF16 (docs/bfloat16.md), a cap read once per process: so
    # in a process of its own, on the CPU's own units
    import subprocess
    import sys

    env = {**os.environ, "GREBENCH_CPU_BF16": "1"}
    if "amx_bf16" in cpu_flags():
        env.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    run = subprocess.run([sys.executable, "-c", "from tests.lm.test_lm_loglikelihood import bf16_batch_drift as d; "
                          "print(d())"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.split()[-1]) <= 1e-4, run.stdout


def test_the_flat_rule_is_the_prefix_tree() -> None:
    # may_attend over one row's tags: three prompts after the head, the first two sharing (4, 5), all
    # three sharing (4); each token sees the head and its ancestors in the tree, each continuation its
    # prompt and itself
    import torch

    from tasks.lm.flat_attention import may_attend
    from tasks.lm.loglikelihood import lay_out

    head = (1, 2, 3)
    row = [(head + (4, 5, 6, 7), ((8, 9), (10,))), (head + (4, 5, 11, 12), ((13, 14, 15),)),
           (head + (4, 16, 17), ((18,),))]
    laid = lay_out(row, len(head))
    # (4, 5, 6), prompt 0's continuations (7, 8) and (7); then 11 and (12, 13, 14); then 16 and (17)
    assert laid.tokens == [4, 5, 6, 7, 8, 7, 11, 12, 13, 14, 16, 17]
    assert laid.positions == [3, 4, 5, 6, 7, 6, 5, 6, 7, 8, 4, 5]
    assert laid.end == [12, 10, 6, 5, 5, 6, 10, 10, 10, 10, 12, 12]
    assert laid.spans == [[(3, 2), (5, 1)], [(7, 3)], [(11, 1)]]
    end = torch.tensor([15] * 3 + [3 + e for e in laid.end])
    index = torch.arange(15)
    allowed = may_attend(end, index[:, None], index[None, :])
    sees = {q: [k for k in range(15) if allowed[q, k]] for q in range(15)}
    assert sees[4] == [0, 1, 2, 3, 4]                      # shared part: the head and itself
    assert sees[6] == [0, 1, 2, 3, 4, 5, 6]                # prompt 0's first continuation
    assert sees[8] == [0, 1, 2, 3, 4, 5, 8]                # its second: not the first
    assert sees[9] == [0, 1, 2, 3, 4, 9]                   # prompt 1's own part: not prompt 0's
    assert sees[12] == [0, 1, 2, 3, 4, 9, 10, 11, 12]
    assert sees[13] == [0, 1, 2, 3, 13]                    # prompt 2 shares only 4 with the others
    assert sees[14] == [0, 1, 2, 3, 13, 14]
    assert all(len(sees[3 + i]) == p + 1 for i, p in enumerate(laid.positions))   # ancestors = position
    assert laid.pairs == int(allowed[3:].sum())            # the FLOP count is the pairs the rule allows


def test_judge_prompts_sharing_a_synopsis_and_some_reviews_compute_each_shared_token_once(embedded_lm) -> None:
    # a judge's prompts quoting one paper: the synopsis in all, the first human review in two of them;
    # the engine computes the prefix tree's tokens (fewer than each prompt's own part after what all
    # share), and every answer matches the plain computation
    from tasks.lm.loglikelihood import packed_rows, row_length

    model, tokenizer = embedded_lm
    synopsis = "Synopsis: the paper proposes a robust estimator for molecular property prediction. " * 3
    reviews = ["Review 1: the ablations are thorough but the baselines are weak. " * 4,
               "Review 2: novelty is limited; the writing in section 3 is dense. " * 4]
    panels = [reviews[0] + "Candidate: clear and sound.", reviews[0] + "Candidate: weak evaluation.",
              reviews[1] + "Candidate: clear and sound."]
    requests = [LoglikelihoodRequest("You judge reviews.", synopsis + panel, f"Score: {n}") for panel in panels
                for n in (3, 8)]
    engine = LoglikelihoodEngine(model, tokenizer, token_budget=1024)
    got = engine.score(requests)
    groups: dict = {}
    for r in requests:
        prompt, target = engine.encode(r)
        groups.setdefault(prompt, []).append(target)
    head_len = min(common_prefix(list(groups)), min(map(len, groups)) - 1)
    units = [(p, tuple(groups[p])) for p in sorted(groups)]
    rows = packed_rows(units, head_len, 1024)
    assert engine.stats.forward_tokens == head_len + sum(row_length(r, head_len) for r in rows)
    shared_review = max(common_prefix([a, b]) for (a, _), (b, _) in zip(units, units[1:], strict=False)) - head_len
    own = sum(len(p) - 1 - head_len + sum(map(len, ts)) for p, ts in units)
    assert shared_review > 40 and engine.stats.forward_tokens == head_len + own - shared_review
    for a, b in zip(got, reference_score(model, tokenizer, requests), strict=True):
        assert max(abs(x - y) for x, y in zip(a.token_logprobs, b.token_logprobs, strict=True)) < 1e-4


def test_a_start_every_continuation_shares_is_scored_once(embedded_lm, metric_requests) -> None:
    # a rating read after a whole review: the review is each answer's start; the engine scores it
    # once, and every answer still gets the values of all its tokens, as when scored alone
    model, tokenizer = embedded_lm
    base = metric_requests[0]
    answers = [f"{base.continuation}\n<rating>\n{n}" for n in (1, 3, 5, 8, 10)]
    requests = [LoglikelihoodRequest(base.system, base.user, answer) for answer in answers]
    for flat in (False, True):
        engine = LoglikelihoodEngine(model, tokenizer, token_budget=1024, flat=flat)
        together = engine.score(requests)
        scored = engine.stats.head_rows
        review = len(engine.encode(LoglikelihoodRequest(base.system, base.user, base.continuation))[1])
        assert scored < review + 5 * 6, flat             # the review once, then each rating's few tokens
        for request, result in zip(requests, together, strict=True):
            (alone,) = LoglikelihoodEngine(model, tokenizer, token_budget=1024, flat=flat).score([request])
            assert result.n_tokens == alone.n_tokens
            assert result.token_logprobs == pytest.approx(alone.token_logprobs, abs=1e-4), flat


def test_layers_are_compiled_only_where_flex_attention_runs_and_can_be_undone(embedded_lm) -> None:
    from tasks.lm.flat_attention import compile_layers

    model, tokenizer = embedded_lm
    layers = model.base_model.layers
    engine = LoglikelihoodEngine(model, tokenizer)
    assert engine.sparsity == "paths"                          # a CPU: attention by path, eager layers
    assert all(layer._compiled_call_impl is None for layer in layers)
    compile_layers(model)                                      # what a GPU engine does (nothing runs here)
    assert all(layer._compiled_call_impl is not None for layer in layers)
    compile_layers(model, False)
    assert all(layer._compiled_call_impl is None for layer in layers)
