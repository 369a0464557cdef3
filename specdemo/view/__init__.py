"""Views: step records → HTML (render), plotly figures (plots), JSON traces (export / replay)."""
