"""The MiniLM sentence encoder behind `embedder()`: token and mean pooling, order, windows."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.lm import embedder

pytestmark = pytest.mark.slow
TEXTS = ["The sampler is fast.", "", "The experiments use only one random seed, which is a weakness."]


def test_token_and_mean_pooling_keep_order_and_unit_norm():
    encoder = embedder()
    assert embedder() is encoder and "minilm" in encoder.identity
    tokens = encoder.embed(TEXTS)
    assert [t.shape[1] for t in tokens] == [384] * 3 and tokens[1].shape == (0, 384)
    assert tokens[0].shape[0] < tokens[2].shape[0]
    alone = encoder.embed([TEXTS[2]])[0]
    assert np.allclose(alone, tokens[2], atol=1e-5)       # batching and order change nothing
    means = encoder.embed(TEXTS, pooling="mean")
    assert [m.shape for m in means] == [(384,)] * 3
    assert np.linalg.norm(means[0]) == pytest.approx(1.0, abs=1e-5) and not means[1].any()
    assert np.allclose(means[2], tokens[2].mean(axis=0) / np.linalg.norm(tokens[2].mean(axis=0)), atol=1e-6)
    with pytest.raises(ValueError, match="pooling"):
        encoder.embed(TEXTS, pooling="max")  # type: ignore[arg-type]


def test_a_texts_vectors_do_not_depend_on_what_else_is_embedded() -> None:
    """Bit for bit: a published BERTScore stays as it was when other texts join a later run."""
    import numpy as np

    from tasks.lm import embedder

    text = "The method is sound, but the ablations leave out the strongest baseline. " * 12
    company = ["Short.", "A much longer review that goes on " * 40, "Clear writing; weak novelty."]
    alone = embedder().embed([text])[0]
    among = embedder().embed([*company, text, company[0]])[3]
    assert alone.shape == among.shape and np.array_equal(alone, among)
