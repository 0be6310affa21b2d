"""The engine's prompt clusters: prompts that share a long prefix beyond the call's common one get a
head of their own (an oracle's questions quoting one candidate), the others are scored together."""

from tasks.lm.loading import common_prefix
from tasks.lm.loglikelihood import prompt_clusters

SYSTEM = (1, 2, 3)
A, B = tuple(range(100, 140)), tuple(range(200, 240))    # two long quoted candidates


def test_questions_quoting_one_candidate_share_a_cluster_and_the_rest_go_together() -> None:
    prompts = [SYSTEM + A + (7,), SYSTEM + B + (8,), SYSTEM + A + (9, 9), SYSTEM + (5,), SYSTEM + B + (6,),
               SYSTEM + (4, 4)]
    clusters = prompt_clusters(prompts, shared_min=32)
    assert clusters == [[SYSTEM + A + (7,), SYSTEM + A + (9, 9)], [SYSTEM + B + (6,), SYSTEM + B + (8,)],
                        [SYSTEM + (4, 4), SYSTEM + (5,)]]
    assert [common_prefix(c) for c in clusters] == [len(SYSTEM + A), len(SYSTEM + B), len(SYSTEM)]
    assert sorted(p for c in clusters for p in c) == sorted(prompts)           # each prompt exactly once


def test_short_shared_parts_and_single_prompts_keep_one_cluster() -> None:
    prompts = [SYSTEM + A[:10] + (7,), SYSTEM + A[:10] + (8,), SYSTEM + B[:5]]
    assert prompt_clusters(prompts, shared_min=32) == [sorted(prompts)]        # 10 shared tokens: not worth a head
    assert prompt_clusters([SYSTEM + A, SYSTEM + A]) == [[SYSTEM + A]]
    assert prompt_clusters(list(reversed(prompts)), shared_min=32) == prompt_clusters(prompts, shared_min=32)


def test_packed_rows_put_prompts_sharing_a_long_prefix_in_one_row_within_the_row_limit() -> None:
    from tasks.lm.loglikelihood import packed_rows, row_length, row_shared

    head = len(SYSTEM)
    questions = [SYSTEM + A + (7, 1), SYSTEM + A + (9, 9, 1), SYSTEM + B + (8, 1)]
    units = [(p, ((5, 6),)) for p in sorted(questions)]
    rows = packed_rows(units, head, row_max=1000, shared_min=32)
    assert rows == [units[:2], units[2:]]                              # A's questions together, B's alone
    assert row_shared(rows[0]) == len(SYSTEM + A)                       # A is computed once for both
    assert row_length(rows[0], head) == len(A) + (1 + 2) + (2 + 2)      # A, then each suffix and its target
    assert row_shared(rows[1]) == len(questions[2]) - 1                 # one prompt: its body (all but last)
    narrow = packed_rows(units, head, row_max=len(A) + 5, shared_min=32)
    assert narrow == [[u] for u in units]                               # a row never outgrows row_max
    assert packed_rows(units, head, row_max=1000, shared_min=len(A) + 1) == [[u] for u in units]
