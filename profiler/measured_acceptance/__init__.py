"""Acceptance measured by running drafts against the target over prompt sets."""
