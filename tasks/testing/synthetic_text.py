"""Word banks and sentence templates for the synthetic venue (all wording is the project's own).

`Topic` fixes the nouns of one paper; the `*_text` helpers draw sentences for it from a seeded
`random.Random`, so the same seed always yields the same venue.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

ADJECTIVES = [
    "Scalable", "Robust", "Sparse", "Adaptive", "Provably Efficient", "Self-Supervised", "Contrastive",
    "Hierarchical", "Equivariant", "Calibrated", "Federated", "Low-Rank", "Causal", "Differentiable",
    "Memory-Efficient", "Uncertainty-Aware", "Modular", "Compositional",
]
METHODS = [
    "Attention", "Diffusion Models", "Graph Neural Networks", "Policy Optimization", "Mixture-of-Experts",
    "State-Space Models", "Kernel Methods", "Normalizing Flows", "Retrieval Augmentation", "Prompt Tuning",
    "Neural Operators", "Variational Inference", "Knowledge Distillation", "Energy-Based Models",
]
TASKS = [
    "Long-Context Language Modeling", "Molecular Property Prediction", "Offline Reinforcement Learning",
    "Out-of-Distribution Detection", "Few-Shot Image Classification", "Time-Series Forecasting",
    "Code Generation", "Protein Structure Design", "Speech Recognition", "Tabular Learning",
    "Continual Learning", "3D Scene Reconstruction", "Weather Prediction", "Recommendation",
]
DATASETS = [
    "ImageNet-1k", "CIFAR-100", "WikiText-103", "the Long Range Arena", "QM9", "D4RL locomotion",
    "LibriSpeech", "HumanEval", "the ETTh1 benchmark", "ShapeNet", "OGB-molhiv", "MovieLens-20M",
]
METRICS = ["accuracy", "perplexity", "F1", "AUROC", "mean absolute error", "normalized return", "pass@1", "BLEU"]
BASELINES = ["a standard Transformer", "the strongest published baseline", "a tuned MLP", "LoRA fine-tuning",
             "an ensemble of five models", "a recurrent baseline", "gradient boosting", "a linear probe"]
SYLLABLES = ["ra", "no", "vi", "ta", "le", "mo", "ze", "qu", "fi", "lo", "ka", "su", "de", "xa", "po"]
KEYWORDS = ["deep learning", "representation learning", "generalization", "efficiency", "robustness",
            "benchmark", "optimization", "theory", "interpretability", "scaling laws", "generative models",
            "reinforcement learning", "graph learning", "language models", "uncertainty"]
AREAS = ["generative models", "reinforcement learning", "learning theory", "applications to physical sciences",
         "optimization", "representation learning for vision, audio, language, and other modalities",
         "datasets and benchmarks", "probabilistic methods"]


@dataclass(frozen=True)
class Topic:
    """The nouns one paper (and its reviews) talk about."""

    acronym: str
    adjective: str
    method: str
    task: str
    dataset: str
    dataset2: str
    metric: str
    baseline: str
    values: dict[str, str] = field(default_factory=dict, compare=False)
    filled: dict[str, str] = field(default_factory=dict, compare=False)

    def fill(self, template: str, rng: random.Random) -> str:
        """The template with this topic's nouns; numbers are drawn once per topic, so all reviews
        of a paper quote the same gain."""
        text = self.filled.get(template)
        if text is None:
            text = template.format_map(self.values)
            text = self.filled[template] = text[0].upper() + text[1:]
        return text


COUNTS = ("2", "3", "4", "5", "8")
GAINS = ("1.2", "2.5", "3.1", "4.8", "7.0", "12.4")


def _choice(rng: random.Random, seq: list[str] | tuple[str, ...]) -> str:
    return seq[int(rng.random() * len(seq))]


def make_topic(rng: random.Random) -> Topic:
    acronym = "".join(_choice(rng, SYLLABLES) for _ in range(2 + (rng.random() < 0.5))).upper()
    d1, d2 = rng.sample(DATASETS, 2)
    adj, method, task = _choice(rng, ADJECTIVES), _choice(rng, METHODS), _choice(rng, TASKS)
    metric, base = _choice(rng, METRICS), _choice(rng, BASELINES)
    values = dict(acr=acronym, adj=adj.lower(), method=method.lower(), task=task.lower(), data=d1, data2=d2,
                  metric=metric, base=base, n=_choice(rng, COUNTS), pct=_choice(rng, GAINS))
    return Topic(acronym, adj, method, task, d1, d2, metric, base, values)


TITLES = [
    "{acr}: {Adj} {Method} for {Task}",
    "{Adj} {Method} for {Task}",
    "On the Limits of {Method} in {Task}",
    "Rethinking {Task} with {Adj} {Method}",
    "{acr}: When {Method} Meets {Task}",
    "Towards {Adj} {Task} via {Method}",
]

ABSTRACT = [
    ["{task} remains difficult when data are scarce and models must generalise beyond their training "
     "distribution.", "Current approaches to {task} trade accuracy for cost in ways that are poorly understood.",
     "Most work on {task} assumes clean inputs, an assumption that rarely holds in deployment."],
    ["We introduce {acr}, a {adj} formulation of {method} tailored to this setting.",
     "We propose {acr}, which couples {method} with a lightweight correction step.",
     "This paper presents {acr}, a family of {adj} estimators built on {method}."],
    ["Our analysis shows that the method converges at a rate independent of the input length.",
     "A simple argument bounds the error of {acr} by the spectral gap of the data operator.",
     "We show that the approach recovers the usual objective as a special case."],
    ["On {data} and {data2}, {acr} improves {metric} by {pct} points over {base}.",
     "Experiments on {data} show gains in {metric} at a fraction of the compute of {base}.",
     "Across {n} benchmarks including {data}, {acr} matches or exceeds {base}."],
    ["Code and trained models will be released.", "We also release a cleaned version of {data2}.",
     "Ablations isolate which components matter."],
]

SUMMARY = [
    "The paper proposes {acr}, a {adj} approach to {task} built on {method}.",
    "The authors study {task} and introduce {acr}, which adapts {method} to reduce training cost.",
    "This submission presents {acr}, a new way of applying {method} to {task}, with experiments on {data}.",
]
SUMMARY_MORE = [
    "The main claim is that the method improves {metric} over {base} on {data} and {data2}.",
    "A theoretical section argues that the estimator is unbiased under mild assumptions.",
    "The empirical section compares against {n} baselines and includes ablations of each component.",
    "The authors also report wall-clock measurements and memory use.",
    "An appendix extends the analysis to the non-stationary case.",
]
STRENGTHS = [
    "The problem is well motivated and relevant to a broad part of the community.",
    "The writing is clear and the method section is easy to follow.",
    "The gains on {data} are consistent across seeds and reported with standard deviations.",
    "The ablation study convincingly isolates the contribution of each component of {acr}.",
    "The theoretical result is clean and, as far as I can tell, correct.",
    "The method is simple to implement and adds little overhead to {base}.",
    "The experiments cover {n} datasets of different sizes, which supports the generality claim.",
    "Releasing code and checkpoints will help reproducibility.",
    "The connection drawn between {method} and {task} is novel to my knowledge.",
]
WEAKNESSES = [
    "The comparison omits recent strong baselines for {task}; beating {base} alone is not convincing.",
    "The improvement in {metric} ({pct} points) is within the variance reported for the baselines.",
    "The theoretical analysis relies on an independence assumption that does not hold on {data2}.",
    "It is unclear how hyperparameters were tuned for the baselines versus for {acr}.",
    "The method section skips the derivation of the update rule; Equation 4 appears without justification.",
    "The compute cost of {acr} is not reported, so the efficiency claim cannot be assessed.",
    "Only {n} random seeds are used, which is too few given the small gaps.",
    "The paper does not discuss failure cases or settings where {method} is known to struggle.",
    "Novelty is limited: the approach is close to existing work that combines {method} with regularisation.",
    "The writing in Section 3 is dense and several symbols are used before being defined.",
]
QUESTIONS = [
    "How sensitive is {acr} to the choice of the temperature parameter?",
    "Could the authors report results on {data2} with the full training budget?",
    "What happens when the assumption of Theorem 1 is violated, for instance under label noise?",
    "Why was {base} chosen as the main baseline rather than a more recent method?",
    "How does the runtime scale with input length compared with standard {method}?",
    "Is the improvement still present when all methods are given the same tuning budget?",
]
LIMITATIONS = [
    "The authors acknowledge the dependence on large pretraining corpora; a discussion of energy cost would help.",
    "Limitations are discussed briefly; potential misuse in surveillance settings deserves a sentence.",
    "The limitations section is adequate.",
    "The paper should state more clearly that results are limited to English-language data.",
]
META = [
    "Reviewers agree that the paper addresses an important question about {task}.",
    "The discussion period clarified the relation to prior work on {method}.",
    "Concerns remain about the strength of the baselines and the size of the gains on {data}.",
    "The rebuttal added experiments on {data2} that addressed the main concern of two reviewers.",
]
SECTION_TEXT = {
    "Introduction": [
        "{task} has attracted sustained attention because it underlies many practical systems.",
        "Despite progress, existing methods based on {method} remain costly and brittle.",
        "We address this gap with {acr}, a {adj} variant that keeps the benefits of {method}.",
        "Our contributions are a new objective, an analysis of its behaviour and a careful empirical study.",
    ],
    "Related Work": [
        "Early work on {task} relied on hand-crafted features and shallow models.",
        "Methods built on {method} have become the dominant approach in the last few years.",
        "Our work is closest to approaches that regularise {method}, but differs in how the penalty is chosen.",
        "Efficiency has been studied separately, mostly through pruning and quantisation.",
    ],
    "Method": [
        "Let x denote an input and y its target; {acr} learns a map f that minimises a penalised risk.",
        "The penalty is computed from a low-dimensional summary of the batch, which keeps the cost linear.",
        "We update the parameters with a two-timescale scheme and clip gradients at a fixed norm.",
        "Proposition 1 shows that the fixed point of this scheme coincides with the regularised optimum.",
    ],
    "Experiments": [
        "We evaluate on {data} and {data2} and report {metric} averaged over {n} seeds.",
        "Baselines include {base} and two recent variants of {method}, all tuned with the same budget.",
        "{acr} improves {metric} by {pct} points on {data} while using less memory.",
        "Ablations show that removing the correction step erases most of the gain.",
    ],
    "Conclusion": [
        "We presented {acr}, a {adj} take on {method} for {task}.",
        "Future work will extend the analysis to settings with distribution shift.",
    ],
    "Acknowledgements": [
        "We thank the anonymous colleagues who commented on early drafts and the cluster support team.",
    ],
    "References": [
        "[1] A. Author and B. Author. A study of {method}. Proceedings of a machine learning venue, 2021.",
        "[2] C. Author. Benchmarks for {task}. Journal of Synthetic Results, 2022.",
        "[3] D. Author et al. Efficient training at scale. Preprint, 2023.",
    ],
    "Appendix": [
        "A. Proof of Proposition 1. The argument follows by bounding each term of the expansion separately.",
        "B. Additional results on {data2}, with per-seed numbers and hyperparameter grids.",
    ],
}


def _pick(rng: random.Random, bank: list[str], k: int) -> list[str]:
    """k distinct items in random order (a partial Fisher-Yates shuffle; faster than rng.sample)."""
    pool = list(bank)
    for i in range(min(k, len(pool))):
        j = i + int(rng.random() * (len(pool) - i))
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]


def randint(rng: random.Random, low: int, high: int) -> int:
    return low + int(rng.random() * (high - low + 1))


def title_text(topic: Topic, rng: random.Random) -> str:
    return _choice(rng, TITLES).format(acr=topic.acronym, Adj=topic.adjective, Method=topic.method, Task=topic.task)


def abstract_text(topic: Topic, rng: random.Random) -> str:
    return " ".join(topic.fill(_choice(rng, slot), rng) for slot in ABSTRACT)


def review_sections(topic: Topic, rng: random.Random) -> dict[str, str]:
    """Summary, strengths, weaknesses, questions and limitations of one review."""
    summary = [topic.fill(_choice(rng, SUMMARY), rng)] + [topic.fill(s, rng) for s in _pick(rng, SUMMARY_MORE, 2)]
    bullets = {
        "strengths": _pick(rng, STRENGTHS, randint(rng, 2, 4)),
        "weaknesses": _pick(rng, WEAKNESSES, randint(rng, 2, 5)),
        "questions": _pick(rng, QUESTIONS, randint(rng, 1, 3)),
    }
    sections = {"summary": " ".join(summary)}
    for name, items in bullets.items():
        sections[name] = "\n".join(f"{i}. {topic.fill(s, rng)}" for i, s in enumerate(items, 1))
    sections["limitations"] = topic.fill(_choice(rng, LIMITATIONS), rng)
    return sections


def meta_review_text(topic: Topic, rng: random.Random, decision: str) -> str:
    body = " ".join(topic.fill(s, rng) for s in _pick(rng, META, 3))
    verdict = "I recommend acceptance." if decision.startswith("Accept") else "I recommend rejection."
    return f"{body} {verdict}"


def section_paragraphs(topic: Topic, rng: random.Random, section: str) -> list[str]:
    return [topic.fill(s, rng) for s in SECTION_TEXT[section]]
