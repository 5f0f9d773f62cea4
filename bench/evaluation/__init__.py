"""Answer-quality evaluation on the manuals (``ragstream eval``)."""
