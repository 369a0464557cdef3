"""What the app does, as plain functions of plain values (no gradio here: app.py wires them)."""
