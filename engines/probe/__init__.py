"""The acceptance probe: prompts, a streaming client, metrics, statistics, and the runner."""
