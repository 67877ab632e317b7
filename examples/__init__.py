"""Runnable examples: the demo pipeline and the sink it uses."""
