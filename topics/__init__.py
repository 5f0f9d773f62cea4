"""The event contract: topic registry, event schemas, keys, serde, producer/consumer factories."""
