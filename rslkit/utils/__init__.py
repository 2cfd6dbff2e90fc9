"""Configuration, logging, checkpoints, seeding and distributed helpers."""
