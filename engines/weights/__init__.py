"""Reading a model folder's weights on its host: checkpoint headers and the target's fingerprint."""
