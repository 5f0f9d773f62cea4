"""The learned answer-sentence selector: training data and a pairwise ranker whose model is a
set of ``evidence.w_*`` weights (``ragstream selector``, docs/selector.md)."""
