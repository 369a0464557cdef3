"""The one layer that imports gradio besides app.py: the tool tabs' and the Lesson's component layouts
(app.py builds the race's and wires every component; the handlers in app/ stay plain functions)."""
