"""MOAT Studio's Gradio app: renders what ``engine`` produces; holds no training or scoring logic."""
