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
    from tasks.lm.loglikelihood import packed_rows, row_length

    head = len(SYSTEM)
    questions = [SYSTEM + A + (7, 1), SYSTEM + A + (9, 9, 1), SYSTEM + B + (8, 1)]
    units = [(p, ((5, 6),)) for p in sorted(questions)]
    rows = packed_rows(units, head, row_max=1000)
    assert rows == [units[:2], units[2:]]                              # A's questions together, B's alone
    assert row_length(rows[0], head) == len(A) + (1 + 2) + (2 + 2)      # A once, then each suffix and its target
    assert row_length(rows[1], head) == len(B) + 1 + 2                  # one prompt: its body (all but last)
    narrow = packed_rows(units, head, row_max=len(A) + 5)
    assert narrow == [[u] for u in units]                               # a row never outgrows row_max


def test_a_row_computes_what_its_prompts_share_once_however_deep_the_sharing_goes() -> None:
    """A judge's prompts quoting one paper: all share its synopsis (40 tokens), two also share its first
    human review (600 tokens) and differ after it. In one row the synopsis is computed once for the
    three and the review once for the two: the row costs its distinct tokens, less than any split."""
    from tasks.lm.loglikelihood import lay_out, packed_rows, row_length

    head = len(SYSTEM)
    reviews = tuple(range(1000, 1600))
    judged = [SYSTEM + reviews + (7, 1), SYSTEM + reviews + (8, 8, 1)]
    other = SYSTEM + reviews[:40] + (9, 1)
    units = [(p, ((5, 6),)) for p in sorted([*judged, other])]
    rows = packed_rows(units, head, row_max=4096)
    assert rows == [units]
    distinct = 40 + 1 + 560 + 1 + 2 + 3 * 2        # the synopsis, 9, the review's rest, 7, (8, 8), targets
    assert row_length(rows[0], head) == distinct == len(lay_out(rows[0], head).tokens)
    apart = row_length(units[:1], head) + row_length(units[1:], head)
    assert apart == distinct + 40
    assert packed_rows(units, head, row_max=distinct - 1) == [units[:1], units[1:]]   # the cheapest cut


def test_the_rows_are_the_split_with_the_fewest_tokens() -> None:
    """Against every split of a few units into consecutive rows, by brute force."""
    import itertools
    import random

    from tasks.lm.loglikelihood import lay_out, packed_rows, row_length

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
            return len(row) == 1 or row_length(row, head) <= row_max
        splits = [_split(units, cuts) for cuts in itertools.product([False, True], repeat=len(units) - 1)]
        best = min(sum(row_length(r, head) for r in split) for split in splits if all(ok(r) for r in split))
        rows = packed_rows(units, head, row_max)
        assert [u for r in rows for u in r] == units and all(ok(r) for r in rows)
        assert sum(row_length(r, head) for r in rows) == best
        assert all(len(lay_out(r, head).tokens) == row_length(r, head) for r in rows)
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
