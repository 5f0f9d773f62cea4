"""The reranker's training step can over-fit one small batch (issue 50; bench/rerank/train.py).

A set-up check, not a quality one: 16 (question, passage, label) pairs, eight relevant and eight
not, trained on with the project's own step (:func:`bench.rerank.train.train_cross_encoder`: the
base MiniLM with a fresh one-logit head from :func:`bench.rerank.export.load_cross_encoder`,
pair tokenization, float labels, ``BCEWithLogitsLoss``, AdamW with warm-up and linear decay,
the default learning rate and frozen layers) for 150 steps of the whole batch. A loop that
learns must drive the batch's loss far below that of a constant prediction (ln 2 = 0.693 nats
for balanced labels) and rank every positive above every negative; a wrong label dtype or
shape, a frozen or untrained head, a learning rate of zero, dropped attention masks or swapped
pairs keep it near the constant.

Needs the torch extra (``make train-venv``; run with ``.local/train-venv/bin/python -m pytest
tests/unit/test_rerank_overfit.py``, about two minutes on 2 cores); skipped in the lean venv.
"""

from __future__ import annotations

import math

import pytest

from ragstream.extras import TORCH_MODULES, missing_modules

pytestmark = pytest.mark.skipif(
    bool(missing_modules(TORCH_MODULES)),
    reason="needs the torch extra (make train-venv; .local/train-venv/bin/python -m pytest)",
)

#: (question, a passage that answers it, a passage on another subject).
FACTS = (
    (
        "What does VACUUM do?",
        "VACUUM reclaims storage occupied by dead tuples.",
        "The json module encodes Python objects as JSON text.",
    ),
    (
        "How do I split a string on whitespace?",
        "str.split() returns a list of the words in the string, separated by whitespace.",
        "CREATE INDEX constructs an index on the specified column of a table.",
    ),
    (
        "What is shared_buffers?",
        "shared_buffers sets the amount of memory the server uses for shared memory buffers.",
        "The itertools module implements a number of iterator building blocks.",
    ),
    (
        "How do I create a table?",
        "To create a table, use the CREATE TABLE command with column names and types.",
        "The random module implements pseudo-random number generators.",
    ),
    (
        "What does os.listdir return?",
        "os.listdir returns a list containing the names of the entries in the directory.",
        "pg_dump is a utility for backing up a PostgreSQL database.",
    ),
    (
        "How do I sort a list?",
        "list.sort() sorts the list in place; sorted() returns a new sorted list.",
        "The ALTER ROLE command changes the attributes of a database role.",
    ),
    (
        "What is a savepoint?",
        "SAVEPOINT establishes a new savepoint within the current transaction.",
        "The pathlib module offers classes representing filesystem paths.",
    ),
    (
        "How do I read a CSV file?",
        "The csv module's reader object iterates over the lines of a CSV file.",
        "work_mem sets the base maximum amount of memory used by a query operation.",
    ),
)
#: Whole-batch steps; the constant prediction's loss on balanced labels, in nats.
STEPS = 150
CONSTANT_LOSS = math.log(2)


@pytest.mark.timeout(900)
def test_training_step_overfits_one_batch() -> None:
    import torch

    from bench.rerank.export import load_cross_encoder
    from bench.rerank.train import TrainOptions, train_cross_encoder

    pairs = [(q, pos, 1.0) for q, pos, _ in FACTS] + [(q, neg, 0.0) for q, _, neg in FACTS]
    pairs = [pairs[i] for i in (0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15)]
    torch.manual_seed(13)
    model = load_cross_encoder(max_length=128)
    options = TrainOptions(epochs=STEPS, batch_size=len(pairs), budget_s=900.0, max_length=128)
    result = train_cross_encoder(model, pairs, options, say=lambda _line: None)
    assert result.steps == STEPS and not result.stopped_early

    features = model.tokenizer(
        [q for q, _, _ in pairs],
        [p for _, p, _ in pairs],
        padding=True,
        truncation="longest_first",
        max_length=128,
        return_tensors="pt",
    )
    assert not model.model.training  # the loop leaves the model in eval mode
    with torch.inference_mode():
        logits = model.model(**features).logits[:, 0]
    labels = torch.tensor([y for _, _, y in pairs])
    loss = float(torch.nn.functional.binary_cross_entropy_with_logits(logits, labels))
    print(f"over-fit: train loss {result.final_loss:.4f}, batch loss {loss:.4f} nats")
    assert loss < 0.05 < CONSTANT_LOSS, f"batch loss {loss:.4f} (constant {CONSTANT_LOSS:.3f})"
    assert result.final_loss < 0.25 * CONSTANT_LOSS
    # every positive above every negative, and on the right side of 0 (sigmoid 0.5)
    assert float(logits[labels == 1].min()) > 0 > float(logits[labels == 0].max())
