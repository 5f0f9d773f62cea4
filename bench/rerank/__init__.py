"""The learned reranker's training side (issue 50): training pairs from the indexed corpus and the
judged question sets, the cross-encoder fine-tune (torch extra, ``make train-venv``) and its int8
ONNX export, the format the lean install serves (:mod:`bench.rerank.export`)."""
