"""The read path and the runtime: the batching consumer loop and the worker pools."""
