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


def test_a_prompt_that_would_cut_what_a_row_shares_starts_a_row_of_its_own() -> None:
    """Two judge prompts quoting one paper's long human reviews share 600 tokens; a third shares only the
    first 40 of them. Joined, the row would share 40 tokens and compute the 560 others twice: it is longer
    than the row and the third prompt apart, so the third starts a row (the row limit would allow it)."""
    from tasks.lm.loglikelihood import packed_rows, row_length

    head = len(SYSTEM)
    reviews = tuple(range(1000, 1600))
    judged = [SYSTEM + reviews + (7, 1), SYSTEM + reviews + (8, 8, 1)]
    other = SYSTEM + reviews[:40] + (9, 1)
    units = [(p, ((5, 6),)) for p in sorted([*judged, other])]
    rows = packed_rows(units, head, row_max=4096, shared_min=32)
    assert sorted(len(r) for r in rows) == [1, 2]
    together = [units[0], units[1], units[2]]
    apart = row_length(rows[0], head) + row_length(rows[1], head)
    assert row_length(together, head) > apart
    # long prompts sharing most of themselves go together beyond the old 1,024-token rows
    assert packed_rows([(p, ((5, 6),)) for p in sorted(judged)], head, row_max=2048, shared_min=32) == \
        [[(p, ((5, 6),)) for p in sorted(judged)]]


def test_the_rows_are_the_split_with_the_fewest_tokens() -> None:
    """Against every split of a few units into consecutive rows, by brute force."""
    import itertools
    import random

    from tasks.lm.loglikelihood import packed_rows, row_length, row_shared

    rng = random.Random(5)
    head = len(SYSTEM)
    joined = 0
    for _ in range(40):
        pool = [tuple(rng.choice([1, 2]) for _ in range(n)) for n in (40, 60)]
        stems = [rng.choice(pool)[: rng.choice([1, 35, 40, 60])] for _ in range(rng.randint(1, 7))]
        prompts = sorted({SYSTEM + s + tuple(rng.randint(3, 9) for _ in range(rng.randint(1, 30))) for s in stems})
        units = [(p, (tuple(range(rng.randint(1, 20))),)) for p in prompts]
        row_max = rng.choice([60, 200, 4096])

        def ok(row, row_max=row_max):
            return len(row) == 1 or (row_shared(row) >= head + 32 and row_length(row, head) <= row_max)
        splits = [_split(units, cuts) for cuts in itertools.product([False, True], repeat=len(units) - 1)]
        best = min(sum(row_length(r, head) for r in split) for split in splits if all(ok(r) for r in split))
        rows = packed_rows(units, head, row_max, shared_min=32)
        assert [u for r in rows for u in r] == units and all(ok(r) for r in rows)
        assert sum(row_length(r, head) for r in rows) == best
        joined += sum(len(r) > 1 for r in rows)
    assert joined > 10        # the cases share prefixes: rows of several prompts are chosen


def _split(units, cuts):
    rows, row = [], [units[0]]
    for unit, cut in zip(units[1:], cuts, strict=True):
        if cut:
            rows.append(row)
            row = []
        row.append(unit)
    return [*rows, row]
