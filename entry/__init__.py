"""Entry points: the ``ragstream`` command line, the demo and the Python client.

The top of the import graph: these modules may import every other package (kernel ``ragstream``,
``topics``, ``ingest``, ``workers``, ``api``, ``infra``, ``bench``); none of those imports them.
"""
