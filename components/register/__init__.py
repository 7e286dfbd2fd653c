"""Compare a candidate with the champion and register it when it is better (see decision.py)."""
