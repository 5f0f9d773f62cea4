"""Resumable answer streams: SSE event ids, the replay of a stream from Kafka, live attachments."""
