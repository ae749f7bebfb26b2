"""MOAT Studio engine: headless data, tools, models, stages and store for Multi-Agent Joint Alignment Tuning.

Nothing in this package imports gradio; the studio (``studio/``) renders what the engine produces.
"""

__version__ = "0.1.0"
